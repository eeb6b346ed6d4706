"""Device runtimes: the interface (``base``) and the embedded ``cpu`` runtime."""
