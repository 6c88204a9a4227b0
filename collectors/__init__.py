"""gpulens collectors."""
