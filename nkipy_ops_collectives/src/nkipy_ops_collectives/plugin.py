"""Plugin module of this pack. It registers nothing yet: the pack is an installable skeleton
whose lowerings (or runtimes) arrive with their own issue, so installing it today is harmless."""
