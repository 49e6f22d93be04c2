"""The memory schema. Every per-user table carries user_id so it can be distributed by it."""

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import OuterRef, Q, Subquery
from django.db.models.functions import Length, Lower
from django.db.models.lookups import GreaterThanOrEqual, LessThanOrEqual
from pgvector.django import CosineDistance, HalfVectorField, VectorField

from memoryapp import clock, embeddings
from memoryapp.vocabulary import FACT_MAX_CHARS, KINDS, TEXT_SEARCH_CONFIG

User = settings.AUTH_USER_MODEL


class Kind(models.TextChoices):
    PREFERENCE = "preference"
    CONSTRAINT = "constraint"
    PROFILE = "profile"
    GOAL = "goal"


class Organization(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=clock.now)

    def __str__(self):
        return self.name


class MembershipQuerySet(models.QuerySet):
    def who_can_sign_in(self):
        """Memberships of active accounts with a usable password (Django marks unusable ones with '!')."""
        return self.filter(user__is_active=True).exclude(user__password__startswith="!").exclude(user__password="")


class Membership(models.Model):
    """Someone who joined an org by invitation and signs in; only members hold roles (never a remembered person)."""

    class Role(models.TextChoices):
        ADMIN = "admin"
        MEMBER = "member"

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=clock.now)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        constraints = [
            # one role per person per organisation
            models.UniqueConstraint(fields=["user", "org"], name="membership_user_org_uniq"),
        ]


class InvitationQuerySet(models.QuerySet):
    def pending(self):
        """Not yet accepted, not revoked, not expired."""
        return self.filter(accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=clock.now())


class Invitation(models.Model):
    """A one-time, expiring link an org admin hands to someone so they can join; only its hash is stored."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="invitations")
    role = models.CharField(max_length=10, choices=Membership.Role.choices, default=Membership.Role.MEMBER)
    # Who it is meant for, in the admin's words: a label only, never matched against accounts.
    note = models.CharField(max_length=100, blank=True)
    token_hash = models.CharField(max_length=64, unique=True)  # sha256 hex; the link's token is never stored
    created_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=clock.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    # Erasing the person who accepted removes the invitation: its note may name them.
    accepted_by = models.ForeignKey(User, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = InvitationQuerySet.as_manager()

    class Meta:
        indexes = [
            # the members page lists an org's invitations, newest first
            models.Index(fields=["org", "-created_at"], name="invitation_org_created_idx"),
        ]


class MemorySettings(models.Model):
    """Per-person memory switch (on by default)."""

    user = models.OneToOneField(User, on_delete=models.CASCADE, primary_key=True, related_name="memory_settings")
    memory_enabled = models.BooleanField(default=True)
    changed_at = models.DateTimeField(default=clock.now)


class ExternalIdentity(models.Model):
    """The agent's own id for a person, unique within the organisation whose key sent it.

    Who is who: a person an org's agents remember is known by this row, never by a Membership (that
    is for people who joined by invitation and sign in). `user` is the remembered person the API
    created for the id, or, once `linked_at` is set, the account of the person who linked it to
    themselves (memoryapp.linking).
    """

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="external_ids")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="external_ids")
    external_id = models.CharField(max_length=128)
    created_at = models.DateTimeField(default=clock.now)
    linked_at = models.DateTimeField(null=True, blank=True)  # when its person linked it to their own account

    class Meta:
        constraints = [
            # the API resolves (key's org, "user") to a person on every call
            models.UniqueConstraint(fields=["org", "external_id"], name="extid_org_external_uniq"),
        ]


class ApiKeyQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True)


class Scope(models.TextChoices):
    """What an API key may do: read memory, write it (sessions, turns, facts), erase people, mint portal links."""

    READ = "read"
    WRITE = "write"
    ERASE = "erase"
    PORTAL = "portal"


def all_scopes():
    return [s.value for s in Scope]


def default_scopes():
    """What a new key may do unless chosen otherwise: erasing people and signing them in are opt-in."""
    return [Scope.READ.value, Scope.WRITE.value]


class ApiKey(models.Model):
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True)  # sha256 hex; the key itself is never stored
    created_at = models.DateTimeField(default=clock.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # A key created without a choice may read and write; `erase` and `portal` are given by hand.
    scopes = ArrayField(models.CharField(max_length=10, choices=Scope.choices), default=default_scopes)

    objects = ApiKeyQuerySet.as_manager()

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    def allows(self, scope):
        """The key carries `scope`."""
        return scope in (self.scopes or [])


class AgentSessionQuerySet(models.QuerySet):
    def for_user(self, user):
        return self.filter(user=user)

    def known_to(self, org):
        """`org`'s sessions with a person it still knows by an id: not one unlinked since (extid_org_external_uniq)."""
        return self.filter(org=org, user_id__in=ExternalIdentity.objects.filter(org=org).values("user_id"))

    def open(self):
        return self.filter(ended_at__isnull=True)


class AgentSession(models.Model):
    class Memory(models.TextChoices):
        ON = "on"
        OFF = "off"

    class EndReason(models.TextChoices):
        EXPLICIT = "explicit"
        IDLE = "idle"
        CAP = "cap"

    class Extraction(models.TextChoices):
        PENDING = "pending"  # open, or ended and waiting for the queue
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"  # will be retried by the sweeper until attempts run out
        SKIPPED = "skipped"  # memory off: nothing is extracted

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="agent_sessions")
    # Deleting an organisation keeps its members' sessions (their personal memory): the link goes.
    org = models.ForeignKey(
        Organization, on_delete=models.SET_NULL, null=True, blank=True, related_name="agent_sessions"
    )
    memory = models.CharField(max_length=3, choices=Memory.choices, default=Memory.ON)
    started_at = models.DateTimeField(default=clock.now)
    last_activity_at = models.DateTimeField(default=clock.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=10, choices=EndReason.choices, blank=True)
    extraction_status = models.CharField(max_length=10, choices=Extraction.choices, default=Extraction.PENDING)
    extraction_attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    turn_count = models.PositiveIntegerField(default=0)
    # The memory block computed by the first recall, reused for the whole session (prompt cache).
    memory_block = models.TextField(null=True, blank=True)
    memory_block_at = models.DateTimeField(null=True, blank=True)
    # The message the stored block was chosen for: support's recall review shows it. Cleared by the
    # nightly retention job once the review window (forgetting.RECALL_MESSAGE_DAYS) has passed.
    memory_block_message = models.TextField(blank=True, default="")
    # The last batches of turns appended with an Idempotency-Key (sessions.KEPT_BATCHES), one per line as
    # "<digest of its turns>:<key>": a retry of one of them (its answer lost on the way) stores nothing twice.
    last_batch = models.TextField(blank=True, default="")

    objects = AgentSessionQuerySet.as_manager()

    class Meta:
        indexes = [
            # sweeper: open sessions ordered by last activity / start
            models.Index(
                fields=["last_activity_at"], condition=Q(ended_at__isnull=True), name="session_open_activity_idx"
            ),
            # sweeper and health page: ended sessions whose extraction has not finished
            models.Index(
                fields=["extraction_status", "next_attempt_at"],
                condition=Q(ended_at__isnull=False) & ~Q(extraction_status__in=["done", "skipped"]),
                name="session_backlog_idx",
            ),
            # "Conversations" page: a user's sessions, newest first
            models.Index(fields=["user", "-started_at"], name="session_user_started_idx"),
        ]

    @property
    def memory_on(self):
        return self.memory == self.Memory.ON


class TurnQuerySet(models.QuerySet):
    def for_user(self, user):
        return self.filter(user=user)


class Turn(models.Model):
    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="turns")
    ordinal = models.PositiveIntegerField()
    role = models.CharField(max_length=10, choices=Role.choices)
    content = models.TextField()
    created_at = models.DateTimeField(default=clock.now)

    objects = TurnQuerySet.as_manager()

    class Meta:
        ordering = ["ordinal"]
        constraints = [
            # a session's turns in order; also the index for reading them back
            models.UniqueConstraint(fields=["session", "ordinal"], name="turn_session_ordinal_uniq"),
        ]
        indexes = [
            # retention job: old turns by age
            models.Index(fields=["created_at"], name="turn_created_idx"),
        ]


class ExtractionRun(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        UNREADABLE = "unreadable"  # the model answered, but not with a "facts" list: nothing learned
        FAILED = "failed"  # the model could not be reached, or the run crashed: retried later
        ABANDONED = "abandoned"  # the worker stopped mid-run and its lease ran out: retried later

    # The run answered for its session: the session is done and is never extracted again.
    FINISHED = (Status.SUCCEEDED, Status.UNREADABLE)

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="extraction_runs")
    backend = models.CharField(max_length=20)  # anthropic | offline | scripted
    model = models.CharField(max_length=100)
    prompt_version = models.CharField(max_length=40)
    verdict_prompt_version = models.CharField(max_length=40, blank=True)
    input_hash = models.CharField(max_length=64)
    started_at = models.DateTimeField(default=clock.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    error = models.TextField(blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    verdict_calls = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    raw_output = models.TextField(blank=True)
    facts_proposed = models.PositiveIntegerField(default=0)  # valid items after validation
    facts_dropped = models.PositiveIntegerField(default=0)  # items the validator rejected
    # Keys (hashes, never text) of the candidates this run has written, each committed with its write,
    # so the next attempt after a crash or a kill skips them instead of writing them twice.
    applied_keys = models.JSONField(default=list, blank=True)

    class Meta:
        indexes = [
            # extraction health: runs per hour by status
            models.Index(fields=["started_at", "status"], name="run_started_status_idx"),
        ]


class MemoryFactQuerySet(models.QuerySet):
    def for_user(self, user):
        return self.filter(user=user, scope=MemoryFact.Scope.PERSONAL)

    def for_org(self, org):
        return self.filter(org=org, scope=MemoryFact.Scope.ORG)

    def live(self):
        return self.filter(superseded_at__isnull=True, expired_at__isnull=True)

    def for_display(self):
        """Without the vectors and the word index: pages and answers show text, and those columns are the
        largest of a row (2.3 KB of vectors; the tsvector is parsed into a string on every read)."""
        return self.defer(*MemoryFact.BULKY)

    def with_last_recalled(self):
        """Annotate when each fact was last put in a memory block (newest recall log; recall_fact_idx)."""
        newest = RecallLog.objects.filter(fact_id=OuterRef("pk")).order_by("-created_at").values("created_at")[:1]
        return self.annotate(last_recall=Subquery(newest))

    def known_to(self, org):
        """Personal facts of the people `org` knows by an external id (what its API keys may reach)."""
        people = ExternalIdentity.objects.filter(org=org).values("user_id")
        return self.filter(scope=MemoryFact.Scope.PERSONAL, user_id__in=people)

    def in_state(self, state):
        """live | superseded | expired | all (expired means expired and not superseded)."""
        if state == "live":
            return self.live()
        if state == "superseded":
            return self.filter(superseded_at__isnull=False)
        if state == "expired":
            return self.filter(superseded_at__isnull=True, expired_at__isnull=False)
        return self

    def for_model(self, model_name):
        return self.filter(embedding_model=model_name)

    def nearest(self, vector, floor=None, model_name=None):
        """Order by cosine similarity to `vector` (exact, on the half-precision copy recall ranks by too),
        keeping those at or above `floor`."""
        qs = self.for_model(model_name or embeddings.model_name()).annotate(
            distance=CosineDistance("embedding_half", vector)
        )
        if floor is not None:
            qs = qs.filter(distance__lte=1 - floor)
        return qs.order_by("distance", "id")


class MemoryFact(models.Model):
    class Scope(models.TextChoices):
        PERSONAL = "personal"
        ORG = "org"

    class Origin(models.TextChoices):
        EXTRACTED = "extracted"
        USER = "user"
        ORG_ADMIN = "org_admin"
        STAFF = "staff"
        AGENT = "agent", "Agent (API)"  # an explicit "remember this" through the agent API
        MCP = "mcp", "Agent (MCP)"  # the same, through the MCP server

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Personal facts belong to a user; org facts to an organisation (user is NULL).
    # No single-column index on user or source_session: fact_user_created_idx and
    # fact_source_session_idx lead with them, and every extra index is written on each fact write.
    user = models.ForeignKey(
        User, on_delete=models.CASCADE, null=True, blank=True, related_name="facts", db_index=False
    )
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, null=True, blank=True, related_name="facts")
    scope = models.CharField(max_length=10, choices=Scope.choices, default=Scope.PERSONAL)
    text = models.TextField()
    kind = models.CharField(max_length=12, choices=Kind.choices)
    # Dimension-less so each backend stores its own size; embedding_model says which.
    embedding = VectorField(null=True, blank=True)
    embedding_model = models.CharField(max_length=80)
    # What recall and neighbour search rank by: the vector at half precision (cosine moves by about
    # 1e-4). Why a copy: it halves each row of fact_user_recall_idx, so a user read cold sits on half
    # as many leaf pages. Filled from `embedding` on every write by a trigger (migration 0017), never by us.
    embedding_half = HalfVectorField(null=True, blank=True, editable=False)
    # Full-text side of hybrid recall; computed by PostgreSQL from the text, never written by us.
    search_vector = models.GeneratedField(
        expression=SearchVector("text", config=TEXT_SEARCH_CONFIG), output_field=SearchVectorField(), db_persist=True
    )
    origin = models.CharField(max_length=12, choices=Origin.choices, default=Origin.EXTRACTED)
    added_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    source_session = models.ForeignKey(
        AgentSession, on_delete=models.SET_NULL, null=True, blank=True, related_name="source_of", db_index=False
    )
    source_turns = ArrayField(models.PositiveIntegerField(), default=list, blank=True)  # turn ordinals
    extraction_run = models.ForeignKey(
        ExtractionRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="facts"
    )
    created_at = models.DateTimeField(default=clock.now)
    last_confirmed_at = models.DateTimeField(default=clock.now)
    confirmation_count = models.PositiveIntegerField(default=1)
    superseded_at = models.DateTimeField(null=True, blank=True)
    superseded_by = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="replaced")
    supersede_reason = models.CharField(max_length=20, blank=True)  # contradicts | corrected | staff
    expired_at = models.DateTimeField(null=True, blank=True)
    expired_rule = models.CharField(max_length=30, blank=True)

    objects = MemoryFactQuerySet.as_manager()
    # The columns pages never show: the vectors and the word index (for_display and its joins defer them).
    BULKY = ("embedding", "embedding_half", "search_vector")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=LessThanOrEqual(Length("text"), FACT_MAX_CHARS), name="fact_text_max_200"),
            models.CheckConstraint(condition=GreaterThanOrEqual(Length("text"), 1), name="fact_text_not_empty"),
            models.CheckConstraint(condition=Q(kind__in=KINDS), name="fact_kind_valid"),
            models.CheckConstraint(
                condition=(Q(scope="personal") & Q(user__isnull=False)) | (Q(scope="org") & Q(org__isnull=False)),
                name="fact_scope_owner",
            ),
        ]
        indexes = [
            # recall and neighbour search: a user's live facts (exact cosine over a few hundred rows).
            # INCLUDE holds every column recall ranks by and shows, so recall reads a cold user from a
            # few neighbouring leaf pages (an index-only scan), not one scattered heap page per fact.
            models.Index(
                fields=["user", "kind", "-last_confirmed_at"],
                include=[
                    "id",
                    "org",
                    "scope",
                    "text",
                    "created_at",
                    "confirmation_count",
                    "embedding_model",
                    "embedding_half",
                    "search_vector",
                ],
                condition=Q(superseded_at__isnull=True, expired_at__isnull=True),
                name="fact_user_recall_idx",
            ),
            # org-tier recall and the org memory page: an org's live facts
            models.Index(
                fields=["org", "kind"],
                condition=Q(scope="org", superseded_at__isnull=True, expired_at__isnull=True),
                name="fact_org_live_idx",
            ),
            # forgetting job: live facts by age, in batches
            models.Index(
                fields=["created_at"],
                condition=Q(superseded_at__isnull=True, expired_at__isnull=True),
                name="fact_live_created_idx",
            ),
            # history pages and erasure: all of a user's facts whatever their state
            models.Index(fields=["user", "created_at"], name="fact_user_created_idx"),
            # conversations pages: what a session taught
            models.Index(fields=["source_session"], name="fact_source_session_idx"),
        ]

    def __str__(self):
        return self.text

    # Why derived from the recall log instead of a column: recall is on every agent turn's critical
    # path, and stamping a column rewrote 20 wide fact rows (vector included) and all their indexes
    # per recall. The log already holds (fact, created_at) under recall_fact_idx.
    @property
    def last_recalled_at(self):
        """When the fact was last put in a memory block, or None (lists: `.with_last_recalled()`)."""
        if "last_recall" not in self.__dict__:
            self.last_recall = (
                RecallLog.objects.filter(fact_id=self.pk)
                .order_by("-created_at")
                .values_list("created_at", flat=True)
                .first()
            )
        return self.last_recall

    @property
    def state(self):
        if self.superseded_at:
            return "superseded"
        if self.expired_at:
            return "expired"
        return "live"


class OrgFactProposal(models.Model):
    """An org-scope fact noticed by extraction, waiting for an org admin."""

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="proposals")
    proposed_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    text = models.TextField()
    kind = models.CharField(max_length=12, choices=Kind.choices)
    source_session = models.ForeignKey(AgentSession, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    extraction_run = models.ForeignKey(
        ExtractionRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=clock.now)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    decided_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    fact = models.ForeignKey(MemoryFact, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # Why the judge held it for an admin's word (it may claim authority); empty for ordinary proposals.
    held_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("text"), FACT_MAX_CHARS), name="proposal_text_max_200"
            ),
            models.CheckConstraint(condition=Q(kind__in=KINDS), name="proposal_kind_valid"),
            # propose_org_fact: two sessions ending together never queue the same text twice
            models.UniqueConstraint(
                "org", Lower("text"), condition=Q(status="pending"), name="proposal_pending_text_unique"
            ),
        ]
        indexes = [
            # the admin's queue: pending proposals of one org
            models.Index(fields=["org", "created_at"], condition=Q(status="pending"), name="proposal_pending_idx"),
        ]


class SignIn(models.Model):
    """A sign-in session's key, recorded when the person signs in, so erasure ends their sessions
    without decoding every row of django_session (and without holding locks while it would)."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+", db_index=False)
    session_key = models.CharField(max_length=40)
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        constraints = [
            # erasure reads a person's keys; a key is recorded once however often the signal fires
            models.UniqueConstraint(fields=["user", "session_key"], name="signin_user_key_unique"),
        ]


class FactCandidateQuerySet(models.QuerySet):
    def pending(self):
        """Still waiting for the person's word (a decided one stays, for the audit, until it lapses)."""
        return self.filter(outcome=FactCandidate.Outcome.PENDING, decision="")


class FactCandidate(models.Model):
    """A candidate fact that was not stored: pending the person's word, or refused (kept for the audit).

    Never recalled, never in a block or a prompt, never superseding or confirming anything: recall
    and the write path read MemoryFact only. Keeping a pending one stores it through the write path.
    """

    class Outcome(models.TextChoices):
        PENDING = "pending"
        REFUSED = "refused"

    class Decision(models.TextChoices):
        KEPT = "kept"
        DISCARDED = "discarded"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # A personal candidate belongs to a user; an org-level refusal (no person known) to an org only.
    user = models.ForeignKey(User, on_delete=models.CASCADE, null=True, blank=True, related_name="+", db_index=False)
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    text = models.TextField()
    kind = models.CharField(max_length=12)  # as sent: a refused candidate's kind may be anything
    reason = models.CharField(max_length=300)
    score = models.FloatField(null=True, blank=True)  # the judge's probability, when it ran
    origin = models.CharField(max_length=12, choices=MemoryFact.Origin.choices)
    note = models.CharField(max_length=300, blank=True)  # who wrote it (for an agent: which key)
    added_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    replaces = models.ForeignKey(MemoryFact, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    source_session = models.ForeignKey(AgentSession, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    source_turns = ArrayField(models.PositiveIntegerField(), default=list, blank=True)
    extraction_run = models.ForeignKey(
        ExtractionRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=clock.now)
    # The person's word on a pending one: the row stays until it lapses, so the audit's counts never shrink.
    decision = models.CharField(max_length=10, choices=Decision.choices, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)

    objects = FactCandidateQuerySet.as_manager()

    class Meta:
        indexes = [
            # a person's "Waiting for you" list, and erasure by user
            models.Index(fields=["user", "outcome", "created_at"], name="candidate_user_idx"),
            # the console's audit (newest first, counts per day) and the lapse sweep
            models.Index(fields=["created_at", "outcome"], name="candidate_created_idx"),
        ]


class FactEvent(models.Model):
    class Action(models.TextChoices):
        CREATED = "created"
        CONFIRMED = "confirmed"
        SUPERSEDED = "superseded"
        CORRECTED = "corrected"
        DELETED = "deleted"
        EXPIRED = "expired"
        RESTORED = "restored"
        PROPOSED = "proposed"
        APPROVED = "approved"
        REJECTED = "rejected"
        PENDING = "pending"  # a candidate held for the person's word (FactCandidate)
        KEPT = "kept"  # the person kept a pending candidate: it was stored
        DISCARDED = "discarded"  # the person discarded a pending candidate
        LAPSED = "lapsed"  # nobody acted on a pending candidate within PENDING_DAYS

    class Actor(models.TextChoices):
        EXTRACTOR = "extractor"
        USER = "user"
        STAFF = "staff"
        ORG_ADMIN = "org_admin"
        FORGETTING = "forgetting"
        AGENT = "agent", "Agent (API)"  # an API key through the agent API; the reason names the key
        MCP = "mcp", "Agent (MCP)"  # an API key through the MCP server; the reason names the key

    # fact_id is not a foreign key: a deletion event outlives the fact it records.
    fact_id = models.UUIDField(null=True, blank=True)
    user = models.ForeignKey(User, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    action = models.CharField(max_length=12, choices=Action.choices)
    actor = models.CharField(max_length=12, choices=Actor.choices)
    actor_user = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    session = models.ForeignKey(AgentSession, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    related_fact_id = models.UUIDField(null=True, blank=True)  # the replacing / confirming fact
    reason = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            # a fact's timeline
            models.Index(fields=["fact_id", "created_at"], name="event_fact_idx"),
            # quality metrics: writes and supersessions per day
            models.Index(fields=["created_at", "action"], name="event_created_action_idx"),
        ]


class RecallLogQuerySet(models.QuerySet):
    def with_facts(self):
        """Each log row with its fact for display (one join; the fact's bulky columns left behind)."""
        return self.select_related("fact").defer(*(f"fact__{name}" for name in MemoryFact.BULKY))


class RecallLog(models.Model):
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    # Indexed by recall_session_idx and recall_fact_idx below, which lead with these columns: a
    # recall inserts ~20 log rows on the agent's critical path, so no index is written twice.
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="recall_logs", db_index=False)
    # No constraint in the database: checking one locked each quoted fact's row, a cold read and a
    # page written per fact on the agent's critical path. Deleting a fact still deletes its log rows
    # (Django cascades), and writing.hold_for_recall keeps deletions out of a recall in progress.
    fact = models.ForeignKey(
        MemoryFact, on_delete=models.CASCADE, related_name="recall_logs", db_index=False, db_constraint=False
    )
    tier = models.CharField(max_length=8)  # always | relevant | org
    score = models.FloatField(null=True, blank=True)
    position = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(default=clock.now)

    objects = RecallLogQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "position"]
        indexes = [
            # "what was injected into this session"
            models.Index(fields=["session", "created_at"], name="recall_session_idx"),
            # "every session this fact was injected into", and a fact's last recall (with_last_recalled)
            models.Index(fields=["fact", "created_at"], name="recall_fact_idx"),
        ]


class RecallReview(models.Model):
    """A staff judgement of one injected fact, for recall precision."""

    recall_log = models.OneToOneField(RecallLog, on_delete=models.CASCADE, related_name="review")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")  # whose memory
    reviewer = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, related_name="+")
    relevant = models.BooleanField(null=True)  # NULL: drawn into the sample, not judged yet
    sampled_at = models.DateTimeField(default=clock.now)
    judged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # precision per month over judged rows
            models.Index(fields=["judged_at"], condition=Q(relevant__isnull=False), name="review_judged_idx"),
        ]


class PortalLink(models.Model):
    """A one-time sign-in link for an end user, issued to their agent."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=clock.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    # Who asked for it, in words ("API key 'desk agent'"): what a session it opens keeps says so.
    made_by = models.CharField(max_length=200, blank=True, default="")
    # The admin who made it on the People page, if a person did: they pass it on, and can never take the
    # memory it opens into their own account ("This is me").
    made_by_user = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")


class PasswordResetLink(models.Model):
    """A one-time, expiring link to set a new password, issued by an org admin or staff; only its hash is stored."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    token_hash = models.CharField(max_length=64, unique=True)  # sha256 hex; the link's token is never stored
    created_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=clock.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)


class SupportAccess(models.Model):
    """Every time staff open a person's facts or conversations."""

    staff = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, related_name="+")
    staff_name = models.CharField(max_length=150)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")  # whose memory
    page = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        indexes = [
            # the export and the user's "who looked" list
            models.Index(fields=["user", "created_at"], name="access_user_idx"),
        ]


class ForgettingRun(models.Model):
    mode = models.CharField(max_length=8)  # log | enforce
    started_at = models.DateTimeField(default=clock.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    examined = models.PositiveIntegerField(default=0)
    matched = models.PositiveIntegerField(default=0)
    removed = models.PositiveIntegerField(default=0)  # past the grace period, deleted for real


class ForgettingEntry(models.Model):
    run = models.ForeignKey(ForgettingRun, on_delete=models.CASCADE, related_name="entries")
    fact = models.ForeignKey(MemoryFact, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(User, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    rule = models.CharField(max_length=30)  # stale_goal | never_recalled
    applied = models.BooleanField(default=False)


class ErasureReceipt(models.Model):
    """Proof that an erasure happened. Holds no personal data."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    subject_ref = models.CharField(max_length=64)  # keyed hash of the user id
    requested_via = models.CharField(max_length=20)  # api | self | command | org
    created_at = models.DateTimeField(default=clock.now)
    counts = models.JSONField(default=dict)
    # The organisations whose assistants knew the person by an id of theirs (names only, never the ids).
    identities = models.JSONField(default=list, blank=True)


class RateCounter(models.Model):
    """One fixed window of one rate-limit bucket, seen by every web process (memoryapp/ratelimit.py).

    The table is UNLOGGED (migration 0009): a counter lost in a crash only restarts a window at zero,
    and no request pays for a WAL write or ships one to a replica.
    """

    bucket = models.CharField(max_length=200)
    window_start = models.BigIntegerField()  # Unix seconds
    expires_at = models.BigIntegerField()  # window_start + the window's length
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            # The conflict target of the counting upsert: one row per bucket and window.
            models.UniqueConstraint(fields=["bucket", "window_start"], name="ratecounter_bucket_window_uniq"),
        ]
        indexes = [
            # Pruning finds the ended windows without reading the live ones.
            models.Index(fields=["expires_at"], name="ratecounter_expires_idx"),
        ]
