"""Prompted judges. One call per task; each task judged independently."""

from .binary import JudgeVerdict, judge_binary, judge_scale
from .parse import parse_binary, parse_scale

__all__ = ["JudgeVerdict", "judge_binary", "judge_scale", "parse_binary", "parse_scale"]
