"""A new excerpt report keeps the whole-log section and the hand-written notes that follow it."""

from __future__ import annotations

from gpulens.diagnosis.evaluate import SECTIONS_START, with_later_sections
from gpulens.diagnosis.logread.evaluate import END, START, write_section


def test_the_whole_log_section_and_the_notes_after_it_survive_a_new_excerpt_report(tmp_path) -> None:
    doc = tmp_path / "report.md"
    doc.write_text("# old excerpt report\n")
    write_section(doc, "## Whole job logs\n\n| a | b |")
    doc.write_text(doc.read_text() + "\n### notes written by hand\n\nkept\n")
    new = with_later_sections("# new excerpt report\n\nfigures\n", doc.read_text())
    assert new.startswith("# new excerpt report\n\nfigures\n\n" + START)
    assert "# old excerpt report" not in new
    assert "## Whole job logs" in new and END in new and new.endswith("### notes written by hand\n\nkept\n")


def test_a_report_without_later_sections_is_written_as_it_is() -> None:
    assert with_later_sections("# report\n", "# an older report, no sections\n") == "# report\n"
    assert SECTIONS_START == START
