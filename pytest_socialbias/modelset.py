"""The run's models by role: specs parsed and checked, clients built on demand, one event
loop per process. Both sides of a run use it: the case runner (worker.py) to run cases,
the aggregator (aggregate.py) to ask the judge about reference labels.
"""

from __future__ import annotations

import re
import sys
import threading
from dataclasses import dataclass

from . import heap
from .cache import CallCache
from .errors import ConfigError
from .judges.binary import JUDGE_PARAMS, YES_NO
from .judges.guards import (
    CLASSIFIER_KIND,
    GUARD_PARAMS,
    GUARDS,
    check_unit,
    guard_kind,
    guard_kind_from_model,
    settle_guard,
)
from .models import CallPool, Model, ModelSpec, check_credentials, parse_spec
from .models.client import EndpointCheck
from .models.local_backend import DEFAULT_NAME as EMBEDDED_MODEL
from .models.planner import Planner
from .models.providers import CLASSIFIER, MANAGED, provider_of
from .protocols import GuardRole, Roles, required_roles
from .runner import LoopRunner

#: How long closing waits for the background SDK warm-up (it takes about a second).
WARM_UP_JOIN_S = 10.0


@dataclass(frozen=True)
class Role:
    """A model role of a run (target, judge, user, guard): which model a call goes to. Not
    the part a process plays in the run (process.py)."""

    name: str
    option: str  # the option that names its model
    defaults: tuple = ()  # decoding parameters it sends unless the spec says otherwise


#: The conversation roles decode as the protocols specify (temperature 0.7, at most 250 new
#: tokens); judges and guards set their own parameters per call.
CONVERSATION_DEFAULTS = (("max_tokens", 250), ("temperature", 0.7))
ROLES = {
    "target": Role("target", "--target", CONVERSATION_DEFAULTS),
    "judge": Role("judge", "--judge"),
    "user": Role("user", "--user-model", CONVERSATION_DEFAULTS),
    "guard": Role("guard", "--socialbias-guard"),
}
ROLE_ORDER = tuple(ROLES)


def role_of(name: str) -> Role:
    """A role by name; the 2nd, 3rd ... judge (``judge-2``) is named by --judge too."""
    return ROLES.get(name) or Role(name, "--judge")


def endpoint_check(role: str, guard_kind_name: str | None = None) -> EndpointCheck:
    """What ``role``'s endpoint check sends (models/client.py): the parameters its calls
    carry. Roles are checked in ROLE_ORDER (then judge-2, judge-3 ...)."""
    base, _, number = role.partition("-")
    order = (ROLE_ORDER.index(base) if base in ROLE_ORDER else len(ROLE_ORDER), int(number or 0))
    if base == "judge":
        return EndpointCheck(order, tuple(JUDGE_PARAMS.items()), YES_NO, adaptive_budget=True)
    if base == "guard":
        max_tokens = guard_kind(guard_kind_name).max_tokens if guard_kind_name else GUARD_PARAMS["max_tokens"]
        return EndpointCheck(order, tuple({**GUARD_PARAMS, "max_tokens": max_tokens}.items()), adaptive_budget=True)
    return EndpointCheck(order)


class ModelSet:
    def __init__(self, settings, part=None):
        from .process import SingleProcess

        self.settings = settings
        self.part = part or SingleProcess()  # process.py: what this process does in the run
        self.run_id = self.part.run_id()  # shared by a run's processes (endpoint checks)
        self.specs: dict[str, ModelSpec] = {}
        self.guard_kind: str | None = None
        self.guard_unit: str | None = None  # the guard spec's unit=, if any
        self.guard_risk: str | None = None  # the criterion a Granite Guardian is asked about
        self.classifier = None  # judges/classifier.ClassifierHead of an hfcls: guard
        self.servers = None  # models/managed.ServerPool: the servers this process started
        self.runner = LoopRunner()
        self._models: dict[str, Model] = {}
        self._pool: CallPool | None = None
        self._pool_lock = threading.Lock()
        self._check_ahead: frozenset = frozenset()  # CallPool.check_ahead (set_check_ahead)
        self._warm_thread: threading.Thread | None = None
        self.placeholders: set = set()  # CallPool identities of placeholder specs (dry run only)
        self.placeholder_reason: str | None = None  # why placeholders stand in (the embedded model missing)
        s = settings
        # With no model option at all, every role runs on the embedded model; that is
        # decided (and its runtime checked) only once suite cases are collected, so
        # ordinary test runs never need it.
        self.uses_local_default = not (s.target or s.judges or s.user or s.guard)
        self._parse({"target": s.target, "judge": s.judge, "user": s.user or s.judge, "guard": s.guard,
                     **{f"judge-{i}": text for i, text in enumerate(s.extra_judges, start=2)}})

    # ---- specs -------------------------------------------------------------------------

    def _parse(self, raw: dict) -> None:
        s = self.settings
        unusable: list[str] = []  # every role's missing key, said at once (one run, not one per role)
        for role, text in raw.items():
            if text:
                option = role_of(role).option if (role != "user" or s.user) else "--judge"
                spec = parse_spec(text, option)
                if role != "guard" and provider_of(spec).can(CLASSIFIER):
                    raise ConfigError(
                        f"{option}={text}: {spec.provider}: is a classifier head, which scores texts and writes "
                        f"nothing: it can only be a detector; pass it as --socialbias-guard={text}"
                    )
                # A replay or a dry run calls nothing: it needs no key (a fork's pull
                # request has none).
                try:
                    check_credentials(spec, option, required=not (s.record == "none" or s.dry_run))
                except ConfigError as exc:
                    if str(exc) not in unusable:  # --judge stands for the user too: said once
                        unusable.append(str(exc))
                self.specs[role] = spec
        if len(unusable) == 1:
            raise ConfigError(unusable[0])
        if unusable:
            raise ConfigError(f"{len(unusable)} model options cannot be used:\n" + "\n".join(f"  {u}" for u in unusable))
        if "guard" in self.specs and provider_of(self.specs["guard"]).can(CLASSIFIER):
            self._classifier_settings()
        elif "guard" in self.specs:
            if s.guard_kind == CLASSIFIER_KIND:
                raise ConfigError(
                    f"--socialbias-guard-kind={CLASSIFIER_KIND} is the kind of classifier heads run in process; "
                    f"--socialbias-guard={s.guard} is a chat model: write --socialbias-guard=hfcls:PATH for a "
                    "classifier, or name the chat guard's own kind"
                )
            self.guard_kind = s.guard_kind or guard_kind_from_model(self.specs["guard"].model)
            if self.guard_kind is None:
                raise ConfigError(
                    f"--socialbias-guard={s.guard}: cannot tell the guard's output format from the model "
                    f"name; pass --socialbias-guard-kind (one of {', '.join(GUARDS.names())})"
                )
            self._guard_settings()

    def _classifier_settings(self) -> None:
        """An hfcls: guard: its labels mapped to our classes, before any case runs
        (judges/classifier.py); ConfigError naming the spec and the fix."""
        from .judges.classifier import resolve_head

        s = self.settings
        if s.guard_kind and s.guard_kind != CLASSIFIER_KIND:
            raise ConfigError(
                f"--socialbias-guard-kind={s.guard_kind} names a chat guard's output format, but "
                f"--socialbias-guard={s.guard} is a classifier head (kind {CLASSIFIER_KIND}); drop the option"
            )
        self.guard_kind = CLASSIFIER_KIND
        self._guard_settings()
        self.classifier = resolve_head(self.specs["guard"], "--socialbias-guard")
        if self.specs["guard"].runtime.get("pair"):
            for unit, where in ((self.guard_unit, f"--socialbias-guard={s.guard}"),
                                (s.guard_unit, f"--socialbias-guard-unit={s.guard_unit}")):
                if unit not in (None, "exchange"):
                    raise ConfigError(
                        f"{where}: a classifier with pair=true reads a user turn and the agent turn after it as "
                        "a sentence pair, so its unit is exchange; drop unit= or pair="
                    )

    def _guard_settings(self) -> None:
        """The guard spec's unit= and risk= (judges/guards.py settle_guard)."""
        s = self.settings
        self.specs["guard"], self.guard_unit, self.guard_risk = settle_guard(
            self.specs["guard"], guard_kind(self.guard_kind), s.guard_risk, f"--socialbias-guard={s.guard}",
        )
        if s.guard_unit:
            check_unit(guard_kind(self.guard_kind), s.guard_unit, f"--socialbias-guard-unit={s.guard_unit}")

    def use_local_default(self, plan_only: bool = False) -> None:
        """Called when cases are collected with no model options: all roles ``local``.

        ``plan_only`` (a dry run, --collect-only: nothing is called): where the embedded
        model is not available, placeholders of it stand in, and ``placeholder_reason``
        says why (models_line names it), instead of a ConfigError."""
        if not self.uses_local_default or "target" in self.specs:
            return
        try:
            self._parse({"target": "local", "judge": "local", "user": "local"})
        except ConfigError as exc:
            for role in ("target", "judge", "user"):
                self.specs.pop(role, None)
            if plan_only:
                self._use_placeholders(str(exc))
                return
            raise ConfigError(
                "no model options given, so suite cases run on the embedded local model, "
                f"but it is not available ({exc}); or pass --target/--judge for API models"
            ) from None

    def use_placeholders(self, reason: str) -> None:
        """Plan on placeholders of the embedded model whatever is installed (``init``
        counts what it wrote: the calls and tokens do not depend on the model)."""
        self._use_placeholders(reason)

    def _use_placeholders(self, reason: str) -> None:
        """Stand-ins of the embedded model for target, judge and user, never checked or built
        (models/client.PlaceholderBackend): a dry run plans the calls a real run would send."""
        from .models.client import CallPool

        self.placeholder_reason = reason
        for role in ("target", "judge", "user"):
            spec = parse_spec("local", role_of(role).option)
            self.specs[role] = spec
            self.placeholders.add(CallPool._identity(spec))
        if self._pool is not None:
            self._pool.placeholders |= self.placeholders

    def models_line(self) -> str:
        """Which model each role of a real run would use, for a dry run or --collect-only
        (which call none): the specs given, or the embedded model (and whether it is
        installed here)."""
        if self.placeholder_reason is not None:
            # One line: a reason that lists each role ("2 model options cannot be used:" and a
            # line per option) says the same for every role; each distinct reason once.
            lines = self.placeholder_reason.splitlines()
            reasons = [re.sub(r"^--[\w-]+: ", "", line.strip()) for line in lines[1:]] or lines
            reason = "; ".join(dict.fromkeys(r for r in reasons if r))
            return (
                "models: no model options given, so a real run would use the embedded local model "
                f"({EMBEDDED_MODEL}) as target, judge and user simulator, which is not installed here "
                f"({reason}); nothing is called now (placeholders of it are planned); "
                "install it, or pass --target/--judge for API models"
            )
        names = {"user": "user simulator"}
        shown = [f"{names.get(role, role)} {spec}" for role, spec in self._ordered_specs()]
        if not shown:
            return "models: none given; a real run needs --target and --judge (or the `local` extra)"
        where = " (the embedded local model)" if self.uses_local_default else ""
        return f"models a real run would use{where}: " + ", ".join(shown)

    def _ordered_specs(self) -> list:
        order = {role: i for i, role in enumerate(ROLE_ORDER)}
        return sorted(self.specs.items(), key=lambda item: (order.get(item[0].split("-")[0], 9), item[0]))

    def missing_roles(self, protocols=None) -> list[str]:
        """Options that must be given before the collected suites' cases can run (each
        protocol says which roles its cases need; detector suites: a judge or a guard)."""
        groups = required_roles(protocols) if protocols else (("target",), ("judge",))
        missing = {group[0] for group in groups if not any(role in self.specs for role in group)}
        return [role_of(r).option for r in ROLE_ORDER if r in missing]

    @property
    def warnings(self) -> list[str]:
        out = []
        judge, target = self.specs.get("judge"), self.specs.get("target")
        if judge is not None and provider_of(judge).judge_warning:
            out.append(provider_of(judge).judge_warning)
        if judge is not None and target is not None and (judge.provider, judge.model, judge.base_url) == (
            target.provider, target.model, target.base_url
        ):
            out.append(
                f"the judge is the target model ({judge}): a model grading its own replies is "
                "not an independent judge; pass --judge with another model"
            )
        return out

    def server_plans(self) -> dict:
        """Role -> the servers this process starts for it (vllm:, server: specs, one per replica;
        models/managed.py): the shared ones on the controller (or the only process),
        per-worker ones (``placement=worker``) on each worker with its share of the GPUs
        (process.py decides)."""
        from .models.managed import placement, plans_for

        out = {}
        for role, spec in self.specs.items():
            if not provider_of(spec).can(MANAGED):
                continue
            option = role_of(role).option
            share = self.part.server_share(placement(spec, option) == "worker", self.settings.gpus)
            if share is not None:
                out[role] = plans_for(spec, option, *share)
        return out

    def missing_servers(self) -> list[str]:
        """What a run would need to start its managed servers and this machine lacks (a
        dry run says so instead of planning a run that cannot start)."""
        from .models.managed import VLLM_HINT, vllm_executable

        if not any(spec.provider == "vllm" for spec in self.specs.values()) or vllm_executable():
            return []
        return [f"vLLM is not installed here (no vllm beside {sys.executable} or on PATH): the run would stop "
                f"before its first case; {VLLM_HINT}"]

    def start_servers(self) -> None:
        """Start this process's managed servers (never for a dry run or a replay, which
        call nothing); ConfigError quoting the log when one fails."""
        s = self.settings
        if s.dry_run or s.record == "none":
            return
        from .models.managed import check_gpu_fit
        from .process import xdist_workers_of

        for role, spec in self.specs.items():
            if spec.provider == "vllm":
                check_gpu_fit(spec, role_of(role).option, s.gpus, xdist_workers_of(self.part))
        plans = self.server_plans()
        if not plans:
            return
        from .models.managed import DEFAULT_START_TIMEOUT_S, ServerPool

        self.servers = ServerPool(s.cache_dir, s.server_timeout or DEFAULT_START_TIMEOUT_S)
        self.servers.start(plans)

    def stop_servers(self) -> None:
        if self.servers is not None:
            self.servers.stop()

    def spec_dicts(self) -> dict:
        out = {role: spec.to_dict() for role, spec in sorted(self.specs.items())}
        for role, spec in self.specs.items():
            if provider_of(spec).can(MANAGED):
                from .models.managed import checkpoint_identity

                out[role]["checkpoint"] = checkpoint_identity(spec.model)  # what the cache key names
                if self.settings.gpus is not None:
                    out[role]["gpus"] = self.settings.gpus
        if "user" in out and self.settings.simulator_check != "rules":
            out["user"]["check"] = self.settings.simulator_check  # the judge also passed its turns
        if "guard" in out:
            out["guard"]["policy"] = self.settings.guard_policy  # what a block did to a dialogue
            out["guard"]["kind"] = self.guard_kind
            if self.classifier is not None:
                out["guard"]["classifier"] = self.classifier.to_dict()
                # What the cache key names: the sha256 of the checkpoint's files.
                out["guard"]["checkpoint"] = provider_of(self.specs["guard"]).cache_identity(self.specs["guard"])[0]
            if self.guard_risk:
                out["guard"]["risk"] = self.guard_risk
        return out

    # ---- clients -------------------------------------------------------------------------

    @property
    def pool(self) -> CallPool:
        with self._pool_lock:
            if self._pool is None:
                cache = None
                if self.settings.record != "off":
                    cache = CallCache(self.settings.cache_dir, self.settings.record, run=self.run_id)
                self._pool = CallPool(
                    cache=cache, concurrency=self.settings.concurrency, local_threads=self.settings.local_threads, gpus=self.settings.gpus,
                    # A dry run's calls are answered by the planning backend (models/planner.py).
                    planner=Planner() if self.settings.dry_run else None, placeholders=set(self.placeholders),
                    miss_hint=self.settings.miss_hint, check_ahead=self._check_ahead,
                )
            return self._pool

    def set_check_ahead(self, protocols) -> None:
        """After collection: the endpoints of the roles the selected cases' protocols need
        are checked at once, when the first call is about to be sent (CallPool.check_ahead)."""
        self._check_ahead = frozenset(role for group in required_roles(protocols) for role in group)
        with self._pool_lock:
            if self._pool is not None:
                self._pool.check_ahead = self._check_ahead

    def model(self, role: str) -> Model:
        if role not in self.specs:
            raise ConfigError(
                f"no model for the {role} role: pass {role_of(role).option}=PROVIDER:MODEL "
                "(or set it in the ini file)"
            )
        if role not in self._models:
            self._models[role] = Model(
                role,
                self.specs[role],
                role_of(role).option,
                self.pool,
                defaults=dict(role_of(role).defaults),
                runner=self.runner,
                check=endpoint_check(role, self.guard_kind),
            )
            # Every role is known before the first call, so an endpoint's roles are
            # checked together in their fixed order, whichever calls first.
            for other in self.specs:
                if other not in self._models:
                    self.model(other)
        return self._models[role]

    @property
    def extra_judge_roles(self) -> list[str]:
        return sorted((r for r in self.specs if r.startswith("judge-")), key=lambda r: int(r.split("-")[1]))

    def roles(self) -> Roles:
        """The run's models by role; a role nobody gave is None (detector suites need
        no target or user simulator)."""
        return Roles(
            target=self.model("target") if "target" in self.specs else None,
            judge=self.model("judge") if "judge" in self.specs else None,
            user=self.model("user") if "user" in self.specs else None,
            system_prompt=self.settings.system_prompt,
            guard=GuardRole(
                self.model("guard"), self.guard_kind, self.settings.guard_policy, self.guard_unit,
                default_unit=self.classifier.default_unit if self.classifier is not None else None,
                output=self.classifier.output if self.classifier is not None else "binary",
            ) if "guard" in self.specs else None,
            extra_judges=[self.model(role) for role in self.extra_judge_roles],
            simulator_check=self.settings.simulator_check,
        )

    def batch_stats(self) -> dict:
        """Role -> what its in-process batcher gathered in this process (models/batchstats.py):
        for the roles whose backend counts batches and was built here; roles that share
        one loaded model (and so one batcher) name each other in ``shared_with``."""
        if self._pool is None:
            return {}
        out: dict = {}
        by_backend: dict = {}
        for role, spec in sorted(self.specs.items()):
            backend = self._pool.built_backend(spec)
            if backend is None or not hasattr(backend, "batch_stats"):
                continue
            out[role] = backend.batch_stats()
            by_backend.setdefault(id(backend), []).append(role)
        for roles in by_backend.values():
            for role in roles:
                if len(roles) > 1:
                    out[role]["shared_with"] = [other for other in roles if other != role]
        return out

    def run(self, coro):
        """Run a coroutine on this process's event loop and wait for it."""
        return self.runner.run(coro)

    def start_warm_up(self) -> None:
        """Build the API clients in a background thread while pytest collects: importing
        an SDK (openai ~1.4 s of CPU, anthropic ~3 s) and loading CA certificates for its
        client (~0.1 s) would otherwise stall the first batch's event loop. Only where
        models are called: not for a dry run, a replay or an xdist controller."""
        s = self.settings
        if s.dry_run or s.record == "none":
            return
        early = [role for role, spec in self.specs.items() if provider_of(spec).build_early]
        if not early:
            return

        resume = heap.pause()  # the SDKs' objects are not walked as they load (heap.py)

        def build() -> None:
            try:
                for role in early:
                    try:
                        self.pool.backend_for(self.specs[role], role_of(role).option)
                    except Exception:  # the real call reports any problem where it belongs
                        return
            finally:
                heap.settle(resume)

        self._warm_thread = threading.Thread(target=build, name="socialbias-warm-up", daemon=True)
        self._warm_thread.start()

    def close(self) -> None:
        if self._warm_thread is not None:
            # Let a warm-up still importing the SDK finish: an import cut off at
            # interpreter shutdown fails with confusing errors (e.g. --collect-only).
            self._warm_thread.join(WARM_UP_JOIN_S)

        async def close_models():
            if self._pool is not None:
                await self._pool.aclose()

        try:
            self.runner.close(close_models)
            if self._pool is not None and self._pool.cache is not None:
                self._pool.cache.close()
        finally:
            self.stop_servers()
