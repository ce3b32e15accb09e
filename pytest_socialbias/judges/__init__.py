"""Prompted judges. One call per task; each task judged independently."""

from .binary import JudgeVerdict, judge_binary
from .parse import parse_binary, parse_scale

__all__ = ["JudgeVerdict", "judge_binary", "parse_binary", "parse_scale"]
