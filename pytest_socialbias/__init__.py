"""pytest-socialbias: gate language-model releases on social bias, as pytest items."""

__version__ = "0.1.0"
