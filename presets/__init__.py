"""The built-in training presets, shipped as package data (one TOML file per preset).

This package holds data only; `cockpit.contract.presets` loads and validates the files.
"""
