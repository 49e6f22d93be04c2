"""The evaluation harness: session-spanning scenarios as a dataset with a scorer.

A scenario is a JSON file: an optional organisation and a list of steps (sessions, recalls,
expectations, clock moves, forgetting, corrections, deletions, the memory switch, erasure and
org approvals). Each scenario runs on the real database, write path, recall, forgetting and
erasure code inside one transaction that is rolled back at the end, in an organisation and
users of its own, so nothing it does outlives it.
"""

import json
import re
import secrets
import statistics
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models, transaction
from django.test import override_settings
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from memoryapp import (
    backends,
    clock,
    embeddings,
    erasure,
    extraction,
    forgetting,
    orgs,
    pending,
    recall,
    sessions,
    writing,
)
from memoryapp.models import FactEvent, MemoryFact, Organization, OrgFactProposal
from memoryapp.vocabulary import KINDS

# The OpenAI-compatible backend has the same prompts and parsing as anthropic, so a scenario about a
# model's answer applies to both; it runs against a local server (Ollama, vLLM) as well as OpenAI.
BACKENDS = ("scripted", "offline", "anthropic", "openai")
SCENARIO_BACKENDS = BACKENDS
ROLES = ("user", "assistant", "tool")
VERDICTS = ("CONTRADICTS", "DUPLICATE", "INDEPENDENT")
FORGET_MODES = ("log", "enforce")


class ScenarioError(ValueError):
    """A scenario that does not follow the format; the message says where and why."""


# --- the format, as pydantic models ---------------------------------------------------------
# Strict: JSON types are taken as they are (no "3" for 3, no 1 for true); unknown keys are errors.


def _not_blank(value):
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _user_name(value):
    if not value.strip() or len(value) > 128 or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("a user name is 1 to 128 printable characters")
    return value


Text = Annotated[str, AfterValidator(_not_blank)]
UserName = Annotated[str, AfterValidator(_user_name)]
Count = Annotated[int, Field(ge=0)]
OnOff = Literal["on", "off"]


class _Format(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TurnSpec(_Format):
    role: Literal[ROLES]
    content: str  # may be empty


class SessionSpec(_Format):
    user: UserName
    turns: list[TurnSpec]
    memory: OnOff = "on"


class ModelSpec(_Format):
    """What the scripted model answers: the extraction answer (any JSON) and verdicts by substring."""

    extract: Any = Field(...)  # required, any shape: malformed answers are what some scenarios test
    verdicts: dict[Text, str] = {}

    @field_validator("verdicts")
    @classmethod
    def _verdicts(cls, value):
        for needle, verdict in value.items():
            if verdict.upper() not in VERDICTS:
                raise ValueError(f"[{needle!r}]: must be one of {', '.join(VERDICTS)}, found {verdict!r}"[:300])
        return {needle: verdict.upper() for needle, verdict in value.items()}


class RecallSpec(_Format):
    user: UserName
    message: Text


class RecallExpect(_Format):
    contains: list[Text] | None = None
    excludes: list[Text] | None = None
    max_facts: Count | None = None
    empty: bool | None = None


class LiveCheck(_Format):
    count: Count | None = None
    contains: list[Text] | None = None
    excludes: list[Text] | None = None


class ContainsCheck(_Format):
    contains: list[Text] | None = None


class OrgLiveCheck(_Format):
    contains: list[Text] | None = None
    excludes: list[Text] | None = None


class UserExpect(_Format):
    user: UserName
    live: LiveCheck | None = None
    superseded: ContainsCheck | None = None
    expired: ContainsCheck | None = None
    confirmations: dict[Text, Count] | None = None
    model_input_excludes: list[Text] | None = None
    org_live: OrgLiveCheck | None = None

    @model_validator(mode="after")
    def _something_to_check(self):
        if all(getattr(self, name) is None for name in type(self).model_fields if name != "user"):
            raise ValueError("nothing to check (add live, superseded, expired, confirmations, ...)")
        return self


class CorrectSpec(_Format):
    user: UserName
    fact: Text
    text: Text
    kind: Literal[KINDS]


class DeleteSpec(_Format):
    user: UserName
    fact: Text


class SwitchSpec(_Format):
    user: UserName
    memory: OnOff


class KeepSpec(_Format):
    user: UserName


class EraseSpec(_Format):
    user: UserName


class ApproveOrgSpec(_Format):
    org: Text
    fact: Text


def _duration(value):
    try:
        delta = clock.parse_duration(value)
    except (ValueError, OverflowError):
        raise ValueError("expected a duration like '91d', '8h' or '45m'") from None
    if delta > timedelta(days=36500):
        raise ValueError("more than a hundred years is not a useful scenario")
    return value


# One model per step type; a step is an object with exactly one of these keys (a session step may
# also carry "model", a recall step "expect").
STEP_MODELS = {
    "session": create_model(
        "SessionStep", __base__=_Format, session=(SessionSpec, ...), model=(ModelSpec | None, None)
    ),
    "recall": create_model(
        "RecallStep", __base__=_Format, recall=(RecallSpec, ...), expect=(RecallExpect | None, None)
    ),
    "expect": create_model("ExpectStep", __base__=_Format, expect=(UserExpect, ...)),
    "advance": create_model("AdvanceStep", __base__=_Format, advance=(Annotated[Text, AfterValidator(_duration)], ...)),
    "forget": create_model("ForgetStep", __base__=_Format, forget=(Literal[FORGET_MODES], ...)),
    "correct": create_model("CorrectStep", __base__=_Format, correct=(CorrectSpec, ...)),
    "delete": create_model("DeleteStep", __base__=_Format, delete=(DeleteSpec, ...)),
    "switch": create_model("SwitchStep", __base__=_Format, switch=(SwitchSpec, ...)),
    # The person keeps every candidate the judge held for their word ("Waiting for you" on /me/).
    "keep": create_model("KeepStep", __base__=_Format, keep=(KeepSpec, ...)),
    "erase": create_model("EraseStep", __base__=_Format, erase=(EraseSpec, ...)),
    "approve_org": create_model("ApproveOrgStep", __base__=_Format, approve_org=(ApproveOrgSpec, ...)),
}
STEP_TYPES = tuple(STEP_MODELS)


class ScenarioSpec(_Format):
    name: Text
    org: Annotated[Text, Field(max_length=40)] | None = None
    # The backends the scenario applies to (default: all). A scenario about how the pipeline treats
    # a model's malformed answer cannot be exercised by a backend that writes its own facts.
    backends: Annotated[list[Literal[SCENARIO_BACKENDS]], Field(min_length=1)] | None = None
    steps: Annotated[list[Any], Field(min_length=1)]


# --- pydantic's first error, said the way a person editing the file needs it ----------------

_FOUND = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object"}
_DICT_FIELDS = {"confirmations", "verdicts"}


def _kind_of(value):
    return "null" if value is None else _FOUND.get(type(value), type(value).__name__)


def _path(prefix, loc):
    out = prefix
    parent = None
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif parent in _DICT_FIELDS:
            out += f"[{part!r}]"
        else:
            out += f".{part}" if out else part
        parent = part
    return out or "the scenario"


def _fields_at(model, loc):
    """The keys allowed in the object at `loc` under `model` (for "unknown key" messages)."""
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if field is None:
            return []
        model = _model_in(field.annotation)
    return sorted(model.model_fields) if model is not None and hasattr(model, "model_fields") else []


def _model_in(annotation):
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _message(exc, model, prefix=""):
    """One line for the first thing wrong, e.g. "steps[0].expect.live: unknown key 'contain' (...)"."""
    err = exc.errors(include_url=False)[0]
    # pydantic puts its own tags ("function-after[...]", "list[str]") in the path; a key the author wrote stays
    loc = tuple(
        p
        for p in err["loc"]
        if not (isinstance(p, str) and (re.fullmatch(r"[\w-]+\[.*\]", p) or p.startswith("function-")))
    )
    kind, value = err["type"], err.get("input")
    where = _path(prefix, loc)
    if kind == "extra_forbidden":
        allowed = ", ".join(_fields_at(model, loc[:-1])) or "none"
        return f"{_path(prefix, loc[:-1])}: unknown key {loc[-1]!r} (allowed: {allowed})"
    if kind == "missing":
        return f"{_path(prefix, loc[:-1])}: missing key {loc[-1]!r}"
    if kind == "literal_error":
        choices = ", ".join(re.findall(r"'([^']*)'", err["ctx"]["expected"]))
        return f"{where}: must be one of {choices}, found {value!r}"[:300]
    if kind in ("int_type", "greater_than_equal"):
        found = "a negative number" if kind == "greater_than_equal" else _kind_of(value)
        return f"{where}: expected a whole number of at least 0, found {found}"
    if kind == "string_type":
        return f"{where}: expected a string, found {_kind_of(value)}"
    if kind == "bool_type":
        return f"{where}: expected true or false, found {_kind_of(value)}"
    if kind == "list_type":
        return f"{where}: expected a list, found {_kind_of(value)}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"{where}: expected an object, found {_kind_of(value)}"
    if kind == "too_short" and loc == ("steps",):
        return "steps: expected a non-empty list of steps"
    if kind in ("string_too_long", "too_long"):
        return f"{where}: at most {err['ctx']['max_length']} characters"
    if kind == "value_error":
        text = str(err["ctx"]["error"])
        return f"{where}{'' if text.startswith('[') else ': '}{text}"
    return f"{where}: {err['msg']}"


def _validate(model, value, prefix):
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ScenarioError(_message(exc, model, prefix)) from None


# --- parsing ------------------------------------------------------------------------


@dataclass
class Step:
    index: int  # 1-based, as people count steps when reading a file
    kind: str  # one of STEP_TYPES
    args: object  # the step's own value, validated (a dict, or a string for advance/forget)
    model: dict | None = None  # session steps: what the scripted model answers
    expect: dict | None = None  # recall steps: what the block must look like

    def describe(self):
        """A short human label, e.g. 'step 3 (recall alice)'."""
        who = self.args.get("user") if isinstance(self.args, dict) else self.args
        label = f"{self.kind} {who}" if who else self.kind
        return f"step {self.index} ({label})"


@dataclass
class Scenario:
    name: str
    org: str | None
    steps: list
    source: str = ""
    backends: tuple | None = None  # None: every backend

    def applies_to(self, backend):
        """True when the scenario is meant to run under `backend`."""
        return self.backends is None or backend in self.backends


def _dump(spec):
    return spec.model_dump(exclude_none=True) if isinstance(spec, BaseModel) else spec


def _parse_step(value, index):
    path = f"steps[{index - 1}]"
    if not isinstance(value, dict):
        raise ScenarioError(f"{path}: expected an object, found {_kind_of(value)}")
    unknown = sorted(k for k in value if k not in STEP_TYPES and k != "model")
    if unknown:
        raise ScenarioError(f"{path}: unknown step or key {unknown[0]!r} (step types: {', '.join(STEP_TYPES)})")
    if "session" in value:
        kind = "session"
    elif "model" in value:
        raise ScenarioError(f"{path}: 'model' belongs on a session step")
    elif "recall" in value:
        kind = "recall"
    else:
        present = [k for k in STEP_TYPES if k in value]
        if len(present) != 1:
            if not present:
                raise ScenarioError(f"{path}: a step needs one of {', '.join(STEP_TYPES)}")
            raise ScenarioError(f"{path}: one step type per step, found {' and '.join(present)}")
        kind = present[0]
    step = _validate(STEP_MODELS[kind], value, path)
    if kind == "session":
        return Step(index, kind, _dump(step.session), model=_dump(step.model) if step.model else None)
    if kind == "recall":
        return Step(index, kind, _dump(step.recall), expect=_dump(step.expect) if step.expect else None)
    return Step(index, kind, _dump(getattr(step, kind)))


def parse_scenario(data, source="", backend="scripted"):
    """Validate one scenario (decoded JSON) into a Scenario; raise ScenarioError saying what is wrong."""
    where = source or "scenario"
    try:
        spec = _validate(ScenarioSpec, data, "")
        steps = [_parse_step(s, i) for i, s in enumerate(spec.steps, start=1)]
        for step in steps:
            if step.kind == "session" and backend == "scripted" and step.model is None:
                raise ScenarioError(
                    f"steps[{step.index - 1}]: a session step needs 'model' (what the extractor answers) "
                    "under the scripted backend"
                )
            if step.kind == "approve_org" and step.args["org"] != spec.org:
                raise ScenarioError(
                    f"steps[{step.index - 1}].approve_org.org: {step.args['org']!r} is not this scenario's org "
                    f"({spec.org!r})"
                )
    except ScenarioError as exc:
        raise ScenarioError(f"{where}: {exc}") from None
    backends_ = tuple(dict.fromkeys(spec.backends)) if spec.backends else None
    return Scenario(name=spec.name, org=spec.org, steps=steps, source=source, backends=backends_)


def scenario_files(paths):
    """The .json files named by `paths` (files, or folders searched recursively), in a stable order."""
    files = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*.json") if p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"no such file or folder: {raw}")
    return files


def load(paths, backend="scripted"):
    """Parse every scenario file: returns (scenarios, [(source, ScenarioError)]) for the broken ones."""
    scenarios, broken = [], []
    for path in scenario_files(paths):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            broken.append((str(path), ScenarioError(f"{path}: not valid JSON ({exc})")))
            continue
        try:
            scenarios.append(parse_scenario(data, source=str(path), backend=backend))
        except ScenarioError as exc:
            broken.append((str(path), exc))
    return scenarios, broken


# --- running --------------------------------------------------------------------------


@dataclass
class Failure:
    where: str  # e.g. "step 3 (recall alice)"
    check: str  # what was checked
    expected: str
    found: str

    def as_dict(self):
        return {"where": self.where, "check": self.check, "expected": self.expected, "found": self.found}


@dataclass
class ScenarioResult:
    name: str
    source: str = ""
    failures: list = field(default_factory=list)
    checks: int = 0
    sessions: int = 0
    facts_written: int = 0  # new facts created by extraction
    writes: int = 0  # extraction writes: created + confirmed
    supersessions: int = 0  # facts superseded by extraction
    blocks: list = field(default_factory=list)  # (facts, characters) per recall
    # Extraction quality against live.contains: expected found, expected total, facts matching, facts total.
    pr: list = field(default_factory=lambda: [0, 0, 0, 0])

    @property
    def passed(self):
        return not self.failures

    def as_dict(self):
        return {
            "name": self.name,
            "source": self.source,
            "passed": self.passed,
            "checks": self.checks,
            "failures": [f.as_dict() for f in self.failures],
            "sessions": self.sessions,
            "facts_written": self.facts_written,
            "writes": self.writes,
            "supersessions": self.supersessions,
            "memory_blocks": [{"facts": f, "chars": c} for f, c in self.blocks],
        }


class StepFailed(Exception):
    """A step could not be carried out (e.g. no fact matches); the scenario stops there."""


class _Rollback(Exception):
    pass


class Recorder:
    """Wraps an extraction backend and keeps every text it was sent."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.seen = []

    def extract(self, text):
        self.seen.append(text)
        return self.inner.extract(text)

    def verdicts(self, new_text, old_texts):
        return self.inner.verdicts(new_text, old_texts)


def _short(text, limit=160):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _listing(texts):
    if not texts:
        return "nothing"
    return "; ".join(f'"{_short(t, 100)}"' for t in texts)


def _article(word):
    return "an" if word[:1] in "aeiou" else "a"


def _facts(n):
    return f"{n} fact" if n == 1 else f"{n} facts"


def _contains(haystack, needle):
    return needle.casefold() in haystack.casefold()


def user_tables():
    """(model, field name) for every column that points at a user: what erasure must empty."""
    User = get_user_model()
    found = []
    for model in apps.get_models():
        for f in model._meta.get_fields():
            if isinstance(f, models.ForeignKey | models.OneToOneField) and f.related_model is User and f.concrete:
                found.append((model, f.name))
    return found


class Runner:
    """Runs one scenario's steps against the database; records failures and metrics."""

    def __init__(self, scenario, backend, result):
        self.scenario = scenario
        self.backend = backend
        self.result = result
        ns = secrets.token_hex(4)
        base = scenario.org or "default"
        self.org = Organization.objects.create(slug=f"eval-{ns}-{base}"[:64].lower().replace(" ", "-"), name=base)
        self.users = {}
        self.erased = set()
        self.inputs = {}  # user name -> texts sent to the extraction model
        self.moved = timedelta(0)

    # -- helpers

    def fail(self, step, check, expected, found):
        self.result.failures.append(Failure(step.describe(), check, expected, found))

    def check(self, step, ok, check, expected, found):
        self.result.checks += 1
        if not ok:
            self.fail(step, check, expected, found)

    def user(self, name):
        """The scenario's user called `name`, created on first use; loaded afresh, as a request would."""
        if name not in self.users:
            self.users[name] = sessions.get_or_create_user(self.org, name).pk
            self.erased.discard(name)
        return get_user_model().objects.get(pk=self.users[name])

    def known_user(self, name):
        """The user called `name` if they exist (never created, or erased: None)."""
        if name not in self.users:
            return None
        return get_user_model().objects.filter(pk=self.users[name]).first()

    def existing_user(self, name):
        user = self.known_user(name)
        if user is None:
            state = "was erased" if name in self.erased else "has had no session yet"
            raise StepFailed(f"user {name!r} {state}")
        return user

    def extraction_backend(self, model):
        if self.backend == "scripted":
            return backends.ScriptedBackend(extract=model["extract"], verdicts=model["verdicts"])
        return backends.BACKENDS[self.backend]()

    def verdict_backend(self):
        """The backend whose verdicts decide duplicates outside a session (org approvals)."""
        return backends.ScriptedBackend() if self.backend == "scripted" else self.extraction_backend(None)

    def find_fact(self, qs, needle, what):
        matches = [f for f in qs if _contains(f.text, needle)]
        if not matches:
            raise StepFailed(f'no {what} contains "{needle}" (there are: {_listing(f.text for f in qs)})')
        if len(matches) > 1:
            raise StepFailed(f'"{needle}" matches {len(matches)} {what}s: {_listing(f.text for f in matches)}')
        return matches[0]

    # -- steps

    def run(self, step):
        getattr(self, f"step_{step.kind}")(step)

    def step_session(self, step):
        args = step.args
        user = self.user(args["user"])
        session = sessions.open_session(self.org, user, memory=args["memory"])
        sessions.add_turns(session, [(t["role"], t["content"]) for t in args["turns"]])
        sessions.end_session(session)
        recorder = Recorder(self.extraction_backend(step.model))
        with override_settings(EXTRACTION_BACKEND=recorder):
            extraction.extract_session(session.id)
            before = MemoryFact.objects.filter(user=user).count()
            # Invariant: running extraction on the same session again never writes anything.
            extraction.extract_session(session.id)
            after = MemoryFact.objects.filter(user=user).count()
        self.check(
            step,
            after == before,
            "re-running extraction on the session writes nothing (built-in)",
            f"{before} facts",
            f"{after} facts",
        )
        self.inputs.setdefault(args["user"], []).extend(recorder.seen)
        events = FactEvent.objects.filter(session=session, actor=FactEvent.Actor.EXTRACTOR)
        created = events.filter(action=FactEvent.Action.CREATED).count()
        self.result.sessions += 1
        self.result.facts_written += created
        self.result.writes += created + events.filter(action=FactEvent.Action.CONFIRMED).count()
        self.result.supersessions += events.filter(action=FactEvent.Action.SUPERSEDED).count()

    def step_recall(self, step):
        user = self.user(step.args["user"])
        message = step.args["message"]
        session = sessions.open_session(self.org, user)
        result = recall.recall(session, message)
        block = result.block
        self.result.blocks.append((len(result.facts), len(block)))
        if writing.memory_allowed(session):
            # Invariant: one block per session (prompt cache), unless the caller asks for a refresh.
            again = recall.recall(session, "a different message later in the same session")
            self.check(
                step,
                again.cached and again.block == block,
                "a second recall in the same session reuses the block (built-in)",
                "the same block, cached",
                f"cached={again.cached}, same={again.block == block}",
            )
        if block:
            system = recall.assemble_system("instructions", "tool guidance", block)
            ok = system[-1]["text"] == block and "cache_control" not in system[-1] and "cache_control" in system[-2]
            self.check(
                step,
                ok,
                "the memory block comes after the cache breakpoint (built-in)",
                "stable blocks, breakpoint, then the memory block",
                _short(json.dumps([sorted(b) for b in system])),
            )
        expect = step.expect or {}
        shown = f'"{_short(block, 600)}" ({_facts(len(result.facts))})' if block else "an empty block"
        for needle in expect.get("contains", []):
            self.check(step, _contains(block, needle), f'block contains "{needle}"', f'"{needle}" in the block', shown)
        for needle in expect.get("excludes", []):
            self.check(
                step, not _contains(block, needle), f'block excludes "{needle}"', f'no "{needle}" in the block', shown
            )
        if "max_facts" in expect:
            n = expect["max_facts"]
            self.check(step, len(result.facts) <= n, f"at most {n} facts", f"<= {n} facts", f"{len(result.facts)}")
        if "empty" in expect:
            want = expect["empty"]
            self.check(
                step,
                (block == "") == want,
                "block is empty" if want else "block is not empty",
                "an empty block" if want else "a non-empty block",
                shown,
            )

    def _substring_checks(self, step, label, texts, spec):
        for needle in spec.get("contains", []):
            self.check(
                step,
                any(_contains(t, needle) for t in texts),
                f'{label} contains "{needle}"',
                f'{_article(label)} {label} fact containing "{needle}"',
                _listing(texts),
            )
        for needle in spec.get("excludes", []):
            self.check(
                step,
                not any(_contains(t, needle) for t in texts),
                f'{label} excludes "{needle}"',
                f'no {label} fact containing "{needle}"',
                _listing([t for t in texts if _contains(t, needle)]),
            )
        if "count" in spec:
            self.check(
                step,
                len(texts) == spec["count"],
                f"{label} count",
                _facts(spec["count"]),
                f"{_facts(len(texts))}: {_listing(texts)}",
            )

    def step_expect(self, step):
        args = step.args
        name = args["user"]
        user = self.known_user(name)
        facts = MemoryFact.objects.for_user(user) if user is not None else MemoryFact.objects.none()
        live = list(facts.live().order_by("created_at", "id"))
        if "live" in args:
            self._substring_checks(step, "live", [f.text for f in live], args["live"])
            if self.backend != "scripted" and args["live"].get("contains"):
                self._score_extraction(args["live"]["contains"], live)
        if "superseded" in args:
            texts = list(facts.filter(superseded_at__isnull=False).values_list("text", flat=True))
            self._substring_checks(step, "superseded", texts, args["superseded"])
        if "expired" in args:
            texts = list(facts.filter(expired_at__isnull=False).values_list("text", flat=True))
            self._substring_checks(step, "expired", texts, args["expired"])
        for needle, want in args.get("confirmations", {}).items():
            matches = [f for f in live if _contains(f.text, needle)]
            if len(matches) == 1:
                found = str(matches[0].confirmation_count)
            else:
                found = f"{len(matches)} live facts match: {_listing(f.text for f in matches)}"
            self.check(
                step,
                len(matches) == 1 and matches[0].confirmation_count == want,
                f'confirmations of "{needle}"',
                f"one live fact confirmed {want} time(s)",
                found,
            )
        sent = self.inputs.get(name, [])
        for needle in args.get("model_input_excludes", []):
            leaks = [t for t in sent if _contains(t, needle)]
            self.check(
                step,
                not leaks,
                f'"{needle}" never reached the extraction model',
                f'no model input containing "{needle}"',
                f"{len(leaks)} of {len(sent)} inputs contain it: {_listing(leaks)}" if leaks else "",
            )
        if "org_live" in args:
            texts = list(MemoryFact.objects.for_org(self.org).live().values_list("text", flat=True))
            self._substring_checks(step, "org live", texts, args["org_live"])

    def _score_extraction(self, expected, live):
        extracted = [f.text for f in live if f.origin == MemoryFact.Origin.EXTRACTED]
        pr = self.result.pr
        pr[0] += sum(1 for e in expected if any(_contains(t, e) for t in extracted))
        pr[1] += len(expected)
        pr[2] += sum(1 for t in extracted if any(_contains(t, e) for e in expected))
        pr[3] += len(extracted)

    def step_advance(self, step):
        delta = clock.parse_duration(step.args)
        # Inside run_scenario's override_settings: undone when the scenario ends.
        settings.CLOCK_OFFSET = settings.CLOCK_OFFSET + delta
        self.moved += delta

    def step_forget(self, step):
        forgetting.run_forgetting(mode=step.args)

    def step_correct(self, step):
        args = step.args
        user = self.existing_user(args["user"])
        fact = self.find_fact(MemoryFact.objects.for_user(user).live(), args["fact"], "live fact")
        try:
            writing.correct_fact(fact, args["text"], args["kind"], actor_user=user)
        except writing.FactRejected as exc:
            raise StepFailed(f"the correction was rejected: {exc}") from None

    def step_delete(self, step):
        args = step.args
        user = self.existing_user(args["user"])
        fact = self.find_fact(MemoryFact.objects.for_user(user).live(), args["fact"], "live fact")
        writing.delete_fact(fact, actor=FactEvent.Actor.USER, actor_user=user, reason="deleted in a scenario")

    def step_keep(self, step):
        user = self.existing_user(step.args["user"])
        for candidate in pending.waiting_for(user):
            pending.keep(candidate, user)

    def step_switch(self, step):
        user = self.user(step.args["user"])
        writing.set_memory_switch(user, step.args["memory"] == "on")

    def step_erase(self, step):
        name = step.args["user"]
        user = self.existing_user(name)
        user_id = user.pk
        erasure.erase_user(user, requested_via="command")
        del self.users[name]
        self.erased.add(name)
        # Invariant: erasure leaves no row anywhere that points at the person.
        left = []
        for model, fname in user_tables():
            n = model._default_manager.filter(**{f"{fname}_id": user_id}).count()
            if n:
                left.append(f"{model._meta.label}.{fname}: {n}")
        if get_user_model().objects.filter(pk=user_id).exists():
            left.append("the account itself")
        self.check(step, not left, "erasure leaves no trace (built-in)", "no rows keyed by the user", ", ".join(left))

    def step_approve_org(self, step):
        pending = OrgFactProposal.objects.filter(org=self.org, status=OrgFactProposal.Status.PENDING).order_by("id")
        proposal = self.find_fact(pending, step.args["fact"], "pending org proposal")
        with override_settings(EXTRACTION_BACKEND=self.verdict_backend()):
            orgs.approve_proposal(proposal, None)


def run_scenario(scenario, backend="scripted"):
    """Run one scenario in a transaction that is rolled back; returns its ScenarioResult."""
    result = ScenarioResult(name=scenario.name, source=scenario.source)
    runner = None
    try:
        # The scenario's clock moves (step "advance") live in this override and end with it.
        with override_settings(CLOCK_OFFSET=settings.CLOCK_OFFSET), transaction.atomic():
            runner = Runner(scenario, backend, result)
            for step in scenario.steps:
                try:
                    # A savepoint per step: a database error leaves the outer transaction usable.
                    with transaction.atomic():
                        runner.run(step)
                except StepFailed as exc:
                    runner.fail(step, "the step could be carried out", "the step to run", str(exc))
                    break
                except Exception as exc:  # noqa: BLE001 - a crash is reported as this scenario's failure
                    last = traceback.extract_tb(exc.__traceback__)[-1]
                    runner.fail(
                        step,
                        "the step ran without an error",
                        "no exception",
                        f"{type(exc).__name__}: {_short(exc, 300)} (at {Path(last.filename).name}:{last.lineno})",
                    )
                    break
            raise _Rollback()
    except _Rollback:
        pass
    return result


def missing_configuration(backend):
    """Why `backend` cannot run here (a sentence), or None when it can."""
    if backends.configured(backend):
        return None
    if backend == "anthropic":
        return "--backend anthropic needs ANTHROPIC_API_KEY"
    return "--backend openai needs OPENAI_BASE_URL (a local server such as Ollama) or OPENAI_API_KEY"


def _distribution(values):
    if not values:
        return None
    ordered = sorted(values)
    return {
        "min": ordered[0],
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))],
        "max": ordered[-1],
        "mean": round(statistics.fmean(ordered), 2),
    }


def metrics(results, backend):
    """Aggregate quality metrics over scenario results."""
    sessions_n = sum(r.sessions for r in results)
    facts = sum(r.facts_written for r in results)
    writes = sum(r.writes for r in results)
    supersessions = sum(r.supersessions for r in results)
    blocks = [b for r in results for b in r.blocks]
    out = {
        "sessions": sessions_n,
        "facts_written": facts,
        "facts_per_session": round(facts / sessions_n, 3) if sessions_n else None,
        "writes": writes,
        "supersessions": supersessions,
        "contradiction_rate_per_100_writes": round(100 * supersessions / writes, 2) if writes else None,
        "memory_blocks": {
            "recalls": len(blocks),
            "facts": _distribution([f for f, _ in blocks]),
            "chars": _distribution([c for _, c in blocks]),
        },
        "extraction": None,
    }
    if backend != "scripted":
        hit_expected, expected, hit_facts, extracted = (sum(r.pr[i] for r in results) for i in range(4))
        out["extraction"] = {
            "precision": round(hit_facts / extracted, 3) if extracted else None,
            "recall": round(hit_expected / expected, 3) if expected else None,
            "expected_facts": expected,
            "expected_found": hit_expected,
            "facts_extracted": extracted,
            "facts_matching": hit_facts,
        }
    return out


def run_all(scenarios, backend="scripted", broken=()):
    """Run scenarios (and count broken files as failures); returns the report as a dict."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}")
    embeddings.backend()  # load the model once, before the first scenario
    skipped = [
        {"name": s.name, "source": s.source, "backends": list(s.backends)}
        for s in scenarios
        if not s.applies_to(backend)
    ]
    results = [run_scenario(s, backend) for s in scenarios if s.applies_to(backend)]
    for source, error in broken:
        result = ScenarioResult(name=Path(source).stem, source=source)
        result.failures.append(Failure("the file", "the scenario follows the format", "a valid scenario", str(error)))
        results.append(result)
    passed = sum(1 for r in results if r.passed)
    return {
        "backend": backend,
        "summary": {
            "passed": passed,
            "failed": len(results) - passed,
            "not_applicable": len(skipped),
            "total": len(results) + len(skipped),
            "checks": sum(r.checks for r in results),
        },
        "metrics": metrics(results, backend),
        "scenarios": [r.as_dict() for r in results],
        "not_applicable": skipped,
    }


def format_failures(report):
    """Readable lines for every failed expectation, grouped by scenario."""
    lines = []
    for s in report["scenarios"]:
        if s["passed"]:
            continue
        lines.append(f"FAILED {s['name']}  [{s['source']}]")
        for f in s["failures"]:
            lines.append(f"  {f['where']}: {f['check']}")
            lines.append(f"    expected: {f['expected']}")
            lines.append(f"    found:    {f['found']}")
    return lines


def format_metrics(report):
    """A few readable lines of the aggregate metrics."""
    m = report["metrics"]
    lines = [
        f"facts per session: {m['facts_per_session']} ({m['facts_written']} facts / {m['sessions']} sessions)",
        f"contradiction rate: {m['contradiction_rate_per_100_writes']} supersessions per 100 writes "
        f"({m['supersessions']} / {m['writes']})",
    ]
    blocks = m["memory_blocks"]
    if blocks["recalls"]:
        f, c = blocks["facts"], blocks["chars"]
        lines.append(
            f"memory blocks ({blocks['recalls']} recalls): facts median {f['median']}, p90 {f['p90']}, max {f['max']}; "
            f"chars median {c['median']}, p90 {c['p90']}, max {c['max']}"
        )
    if m["extraction"]:
        e = m["extraction"]
        lines.append(
            f"extraction precision {e['precision']} ({e['facts_matching']}/{e['facts_extracted']}), "
            f"recall {e['recall']} ({e['expected_found']}/{e['expected_facts']})"
        )
    return lines
