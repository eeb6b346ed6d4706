"""The plugin layer: hook specifications, the versioned hook API, the registries packs fill and
the plugin manager that loads them from entry points.

It sits just above the IR: everything that lowers, compiles or runs asks it what is installed.
"""
