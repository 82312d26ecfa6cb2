"""Profiles: TOML files and built-ins, validated into frozen job specs."""
