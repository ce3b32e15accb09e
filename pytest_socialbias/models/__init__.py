"""Model specs, backends and the role-bound client every protocol uses."""

from .base import ChatResponse, UsageCounter
from .client import CallPool, Model, build_backend, check_credentials
from .spec import ModelSpec, parse_spec

__all__ = [
    "ChatResponse",
    "Model",
    "CallPool",
    "ModelSpec",
    "UsageCounter",
    "build_backend",
    "check_credentials",
    "parse_spec",
]
