"""Measurements that expose RidgeFill's error: needles, distant-context loss, splices, statistics."""
