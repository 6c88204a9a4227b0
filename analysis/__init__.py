"""gpulens analysis."""
