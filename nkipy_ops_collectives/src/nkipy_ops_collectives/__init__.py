"""nkipy-ops-collectives: lowerings of _c10d_functional collectives (skeleton)."""
