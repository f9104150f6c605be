"""``isotropy report``: ``report`` (run directories -> cells -> the papers' tables) and
``figures`` (the papers' figures)."""
