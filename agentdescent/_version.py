"""The package version, in one place (the package root and the modules that report it read it here)."""

VERSION = "0.1.0"
