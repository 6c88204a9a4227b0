"""gpulens dashboard."""
