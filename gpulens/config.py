"""Configuration: defaults, then ``gpulens.toml``, then ``GPULENS_*`` environment overrides.

File lookup order (the first file found is read): the ``--config`` option,
``$GPULENS_CONFIG``, ``./gpulens.toml``, ``$XDG_CONFIG_HOME/gpulens/gpulens.toml``
(``~/.config/gpulens/gpulens.toml``), then the system-wide ``/etc/gpulens/gpulens.toml``
(what agents, epilogs and timers on many nodes share), then the defaults. The file has one
table per section::

    data_dir = "/var/lib/gpulens"

    [collect]
    interval = 5.0
    port = 9847

Every key can be overridden from the environment as ``GPULENS_<SECTION>_<KEY>``
(``GPULENS_COLLECT_INTERVAL=10``); top-level keys as ``GPULENS_<KEY>``
(``GPULENS_DATA_DIR``). Values are converted to the type of the default.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpulens.errors import ConfigError

__all__ = [
    "CollectConfig",
    "Config",
    "DashboardConfig",
    "DiagnoseConfig",
    "ExporterConfig",
    "LiveConfig",
    "ValidateConfig",
    "SlurmConfig",
    "default_data_dir",
    "SYSTEM_CONFIG_DIR",
    "user_cache_dir",
    "find_config_file",
    "load_config",
]

#: Default ports. 9847 and 9848 are not taken by any exporter in Prometheus's
#: default-port allocation list; 8501 is Streamlit's own default.
AGENT_PORT = 9847
EXPORTER_PORT = 9848
DASHBOARD_PORT = 8501
#: Folder of the system-wide config file, read after the user's files.
SYSTEM_CONFIG_DIR = Path("/etc/gpulens")


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpulens"


def user_cache_dir() -> Path:
    """Per-user cache (``$XDG_CACHE_HOME/gpulens``): what readers cache never goes to the data dir."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpulens"


@dataclasses.dataclass
class CollectConfig:
    interval: float = 5.0
    node: str = dataclasses.field(default_factory=socket.gethostname)
    host: str = "127.0.0.1"
    port: int = AGENT_PORT
    job_env_key: str = "GPULENS_JOB_ID"
    require_gpu: bool = False
    backend: str = "auto"  # auto | nvml | fake | none
    segment_seconds: float = 300.0
    proc_root: str = "/proc"
    sysfs_root: str = "/sys"
    #: commit queued samples to the spool this often (one transaction per flush)
    flush_seconds: float = 30.0
    #: rows kept in memory while the store is unwritable (full disk); older ones are dropped
    max_buffer_rows: int = 2_000_000
    #: interfaces to skip (regular expression on the name); "" keeps every interface
    net_exclude: str = r"^(veth|cali|docker|br-|virbr|flannel|cni|lxc|tunl|vxlan)"
    fake_scenario: str = ""


@dataclasses.dataclass
class ExporterConfig:
    host: str = "127.0.0.1"
    port: int = EXPORTER_PORT
    #: scrapes within this many seconds of the last refresh are served from memory
    cache_seconds: float = 15.0
    #: the goodput waterfall scans the window's GPU samples: refreshed this often
    slow_cache_seconds: float = 300.0
    #: bound on vcs, jobs and nodes exported as label values
    top_n: int = 20
    #: goodput and failure GPU-hours cover this many days before the newest attempt (0 = all)
    window_days: float = 7.0
    #: node anomaly score = max over this many latest scored hours
    anomaly_hours: float = 6.0


@dataclasses.dataclass
class DashboardConfig:
    host: str = "127.0.0.1"
    port: int = DASHBOARD_PORT
    #: Blacklist changes from the dashboard need this token (empty: read-only).
    operator_token: str = ""
    #: Prometheus base URL (e.g. http://127.0.0.1:9090); firing alerts show on Overview.
    prometheus_url: str = ""
    #: Seconds an analysis result stays cached before the store is read again.
    cache_ttl: float = 60.0
    #: Seconds to wait for Prometheus before calling it unreachable.
    prometheus_timeout: float = 2.0


@dataclasses.dataclass
class DiagnoseConfig:
    blacklist_min_jobs: int = 2
    early_stop_tolerance: float = 0.001
    # --- origin network, blacklist and bad nodes (docs/diagnosis.md) ---
    #: extra evidence per additional distinct user behind an input's failures
    blacklist_user_weight: float = 1.0
    #: distinct jobs with infrastructure failures or hardware signals that flag a node
    node_min_jobs: int = 2
    #: hardware XID / uncorrectable-ECC events that flag a node on their own
    node_min_hw_events: int = 3
    #: other jobs failing on the same node within this many seconds are co-failures
    cofailure_window_s: float = 3600.0
    #: XIDs this long before start / after end of an attempt still count for it
    xid_margin_s: float = 300.0
    #: hardware XIDs this long before a failed attempt's end count as what ended it (node_health)
    failure_xid_window_s: float = 1800.0
    #: an attempt that failed within this many seconds failed at start-up
    startup_seconds: float = 300.0
    #: ... and within this many seconds, in its first iteration(s)
    first_iteration_seconds: float = 1200.0
    #: BDeu equivalent sample size of the origin network
    bn_equivalent_sample_size: float = 10.0
    #: weight (in rows) of the built-in synthetic history when a store has labels
    bn_prior_rows: int = 2000
    #: One-Class SVM nu (expected share of anomalous node-hours)
    anomaly_nu: float = 0.05
    #: bad nodes (issue 17): false-discovery rate of the node flags (Benjamini-Hochberg q)
    node_fdr: float = 0.01
    #: a node-hour with at least this anomaly score is a hardware signal for blame
    node_anomaly_signal: float = 0.8
    #: the GpulensNodeFlaggedBad alert fires only on flags at least this confident (1 - q)
    node_alert_confidence: float = 0.99


@dataclasses.dataclass
class LiveConfig:
    """The live straggler watcher (``gpulens nodes live --watch``, docs/straggler.md)."""

    #: seconds between scrapes of the running jobs' agents
    interval: float = 5.0
    #: each node's agent /metrics; {node} is replaced by the node name
    agent_url: str = "http://{node}:9847/metrics"
    #: optional JSON file {"node": "url"} overriding agent_url per node
    agents_file: str = ""
    scrape_timeout: float = 2.0
    scrape_threads: int = 32
    #: re-read the running jobs from the store this often
    jobs_every_s: float = 15.0
    #: refresh an open detection's last_seen in the store this often
    heartbeat_s: float = 30.0
    #: an open detection not refreshed for this long is not current (the watcher stopped)
    stale_s: float = 120.0
    # detector windows (gpulens.diagnosis.straggler.DetectorParams)
    grace_s: float = 120.0
    learn_s: float = 120.0
    smooth_s: float = 30.0
    count_s: float = 60.0
    hard_window_s: float = 30.0
    medium_window_s: float = 40.0
    soft_window_s: float = 150.0
    clear_s: float = 30.0


@dataclasses.dataclass
class ValidateConfig:
    steps: int = 2
    timeout: float = 120.0
    memory_limit_bytes: int = 8 * 1024**3
    file_size_limit_bytes: int = 1024**3
    max_gpus: int = 64
    #: No CPU, I/O, output or step for this long before the first step = a hang.
    hang_seconds: float = 30.0
    #: SIGTERM -> SIGKILL grace when the run is ended.
    kill_grace_seconds: float = 2.0
    #: GPU backend for picking the validation GPU: auto | nvml | fake | none.
    backend: str = "auto"
    #: Scenario file for backend = "fake" (see docs/collectors.md).
    fake_scenario: str = ""
    #: Local GPU indexes the validator may use, e.g. "0,2-3"; empty = all.
    pool: str = ""
    #: A GPU is idle at or below this utilization (percent) and memory in use.
    idle_utilization: float = 5.0
    idle_memory_bytes: int = 512 * 1024**2
    #: Hours a prevented failure would have held each GPU when the store has no history.
    failure_hours: float = 0.5
    #: GPU types a job may request, with memory in bytes and price per hour.
    gpu_types: dict[str, dict[str, float]] = dataclasses.field(
        default_factory=lambda: {
            "T4": {"memory_bytes": 16 * 1024**3, "price_per_hour": 0.35},
            "V100": {"memory_bytes": 32 * 1024**3, "price_per_hour": 2.5},
            "A100": {"memory_bytes": 80 * 1024**3, "price_per_hour": 3.7},
            "H100": {"memory_bytes": 80 * 1024**3, "price_per_hour": 6.0},
            "H200": {"memory_bytes": 141 * 1024**3, "price_per_hour": 8.0},
        }
    )


@dataclasses.dataclass
class SlurmConfig:
    """``gpulens slurm epilog`` and the sbatch filter (docs/slurm.md)."""

    #: The epilog's whole time budget (seconds); past it the job stays queued and exit is 0.
    epilog_timeout: float = 20.0
    #: Ask ``scontrol show job`` for the expanded log paths, times, state and array/het ids.
    scontrol: bool = True
    scontrol_timeout: float = 5.0
    #: Budget of the static checks run at sbatch; past it the job is let through.
    filter_timeout: float = 10.0


@dataclasses.dataclass
class Config:
    data_dir: Path = dataclasses.field(default_factory=default_data_dir)
    collect: CollectConfig = dataclasses.field(default_factory=CollectConfig)
    exporter: ExporterConfig = dataclasses.field(default_factory=ExporterConfig)
    dashboard: DashboardConfig = dataclasses.field(default_factory=DashboardConfig)
    diagnose: DiagnoseConfig = dataclasses.field(default_factory=DiagnoseConfig)
    validate: ValidateConfig = dataclasses.field(default_factory=ValidateConfig)
    live: LiveConfig = dataclasses.field(default_factory=LiveConfig)
    slurm: SlurmConfig = dataclasses.field(default_factory=SlurmConfig)
    source: Path | None = None


_SECTIONS = ("collect", "exporter", "dashboard", "diagnose", "validate", "live", "slurm")


def find_config_file(explicit: str | os.PathLike[str] | None = None, *,
                     system_dir: Path | None = None) -> Path | None:
    """The config file to read (see the module docstring), or None for the defaults.
    ``system_dir`` replaces :data:`SYSTEM_CONFIG_DIR` (tests)."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(
                f"Config file {path} does not exist.", "Pass an existing file to --config."
            )
        return path
    env = os.environ.get("GPULENS_CONFIG")
    if env:
        return find_config_file(env)
    candidates = [Path.cwd() / "gpulens.toml"]
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    candidates.append(Path(xdg) / "gpulens" / "gpulens.toml")
    candidates.append((SYSTEM_CONFIG_DIR if system_dir is None else system_dir) / "gpulens.toml")
    return next((c for c in candidates if c.is_file()), None)


def _convert(value: Any, default: Any, where: str) -> Any:
    """Convert ``value`` (from TOML or an environment string) to the type of ``default``."""
    try:
        if isinstance(default, bool):
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in {"1", "true", "yes", "on"}:
                return True
            if text in {"0", "false", "no", "off"}:
                return False
            raise ValueError(value)
        if isinstance(default, int):
            if isinstance(value, bool):
                raise ValueError(value)
            return int(value)
        if isinstance(default, float):
            return float(value)
        if isinstance(default, Path):
            if not isinstance(value, str | os.PathLike) or not str(value).strip():
                raise ValueError(value)  # data_dir = 5 must not become ./5
            return Path(os.path.expanduser(str(value)))
        if isinstance(default, dict):
            if not isinstance(value, dict):
                raise ValueError(value)
            return value
        return str(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"Invalid value {value!r} for {where}: expected {type(default).__name__}.",
            "Fix the value in gpulens.toml or the GPULENS_* environment variable.",
        ) from None


def _apply(target: Any, values: Mapping[str, Any], where: str) -> None:
    fields = {f.name for f in dataclasses.fields(target)}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(
                f"Unknown setting {where}{key} in the config.",
                f"Known settings here: {', '.join(sorted(fields))}.",
            )
        setattr(target, key, _convert(value, getattr(target, key), f"{where}{key}"))


def load_config(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    system_dir: Path | None = None,
    **overrides: Any,
) -> Config:
    """Build the effective configuration. ``overrides`` (e.g. ``data_dir``) win over all;
    ``system_dir`` replaces ``/etc/gpulens`` (tests)."""
    env = os.environ if env is None else env
    cfg = Config()
    file = find_config_file(path, system_dir=system_dir)
    if file is not None:
        _apply_file(cfg, file)
    _apply_env(cfg, env)
    for key, value in overrides.items():
        if value is not None:
            _apply_top(cfg, {key: value}, "option ")
    return cfg


def _read_toml(file: Path) -> dict[str, Any]:
    """The parsed config file; a ConfigError when it cannot be read or is not TOML."""
    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"Config file {file} is not valid TOML ({exc}).",
            "Fix the syntax or point --config at another file.",
        ) from None
    except OSError as exc:
        raise ConfigError(f"Config file {file} cannot be read ({exc.strerror}).") from None


def _apply_file(cfg: Config, file: Path) -> None:
    """Apply the settings of a config file (top-level keys, then each section's table)."""
    data = _read_toml(file)
    cfg.source = file
    top = {k: v for k, v in data.items() if k not in _SECTIONS}
    _apply_top(cfg, top, str(file))
    for section in _SECTIONS:
        if section in data:
            if not isinstance(data[section], dict):
                raise ConfigError(f"[{section}] in {file} must be a table.")
            _apply(getattr(cfg, section), data[section], f"{section}.")


def _apply_env(cfg: Config, env: Mapping[str, str]) -> None:
    """Apply the ``GPULENS_<SECTION>_<KEY>`` and ``GPULENS_DATA_DIR`` variables; others named
    GPULENS_* that match no setting are left alone."""
    for key, raw in env.items():
        if not key.startswith("GPULENS_") or key == "GPULENS_CONFIG":
            continue
        name = key[len("GPULENS_") :].lower()
        section, _, rest = name.partition("_")
        if section in _SECTIONS and rest:
            target = getattr(cfg, section)
            if rest in {f.name for f in dataclasses.fields(target)}:
                _apply(target, {rest: raw}, f"{section}.")
        elif name == "data_dir":
            cfg.data_dir = _convert(raw, cfg.data_dir, key)

def _apply_top(cfg: Config, values: Mapping[str, Any], where: str) -> None:
    for key, value in values.items():
        if key != "data_dir":
            raise ConfigError(
                f"Unknown top-level setting {key!r} in {where}.",
                f"Top-level keys: data_dir; sections: {', '.join(_SECTIONS)}.",
            )
        cfg.data_dir = _convert(value, cfg.data_dir, "data_dir")
