"""hero's keys in Redis (``state_url``): a lease per story, and what a worker publishes of
the story it runs for the coordinator to mirror into its home.

Keys, for a prefix ``P`` (``engine_queue``) and a story key ``K`` (``<id>``, ``<plan>/<id>``):

- ``P:lease:K``: the worker that runs the story (``host:pid:thread``), expiring after
  ``lease_s`` unless renewed. Taken with SET NX: one run per story at a time.
- ``P:pending:K``: the task id the coordinator sent; the worker that takes the lease
  clears it. Neither lease nor pending mark for long: the story was lost (a dead worker,
  a broker that lost its data), and the coordinator sends it again.
- ``P:state:K``: the run record (``runs/state/<id>.json``) as the worker last saved it.
- ``P:file:K:<name>`` (names in ``P:files:K``, seals in ``P:seals:K``): ``runs/<K>/<name>``
  as the worker has it: the round traces, verify logs, error log. Append-only files are
  appended to.
- ``P:story:K``: the story file as the worker has it (with the feedback hero appends).
- ``P:log:K``: the progress lines, in order.
- ``P:wip:K``: the worker's last snapshot of the story's worktree (a commit on the remote's
  ``refs/hero/wip/<branch>``, see hero.engine.wip), for the next worker of the round.
- ``P:done:K``: the dispatch whose run ended, and how.
- ``P:dispatch:K``: the dispatch the coordinator sent last.
- ``P:mirrored:K``: the dispatch whose ending the coordinator has mirrored (its worker
  keeps the ending published, and the lease, until then).
- ``P:refused:K``: why a worker last refused a task of the story (for the coordinator's log).

Celery's own keys (the queue, kombu's bindings) are under ``P:kombu:`` (see hero.engine.app):
a Redis ACL user limited to ``~P:*`` and ``&P:*`` runs hero.

Every write a worker makes checks, in the same Lua call, that it still holds the lease: a
worker that lost its story (it was presumed dead) cannot overwrite the new run's record.
What a worker publishes is sealed (hero.engine.seal); a reader checks the seal, and bounds
what it reads (hero.engine.trust): Redis is hostile input.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import TYPE_CHECKING, Any

from hero.engine.trust import MAX_FILE_BYTES, MAX_FILES, MAX_LOG_CHARS, Untrusted, dispatch_of
from hero.errors import HeroError
from hero.state import MAX_STATE_BYTES
from hero.story.record import MAX_STORY_BYTES

if TYPE_CHECKING:
    import redis

    from hero.engine.seal import Seal, Sealed

#: Lease renewal: ``ok`` (still ours), ``retaken`` (it had vanished, a broker that lost its
#: data: taken again), ``lost`` (someone else holds it).
_RENEW = """
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 'ok'
elseif not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 'retaken'
end
return 'lost'
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
#: KEYS: lease, target[, files set, seals hash]; ARGV: owner, op, value, expected length,
#: name, lease ms[, seal]. -2: another worker holds the lease. A lease that vanished (a
#: broker that lost its data) is taken again, as a renewal would. -1: an append whose
#: expected length is not the file's. A file's seal is set with its content, atomically.
_WRITE = """
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[6])
elseif v ~= ARGV[1] then
  return -2
end
if ARGV[2] == 'set' then
  redis.call('SET', KEYS[2], ARGV[3])
elseif ARGV[2] == 'append' then
  if redis.call('STRLEN', KEYS[2]) ~= tonumber(ARGV[4]) then
    return -1
  end
  redis.call('APPEND', KEYS[2], ARGV[3])
elseif ARGV[2] == 'push' then
  return redis.call('RPUSH', KEYS[2], ARGV[3])
end
if KEYS[3] then
  redis.call('SADD', KEYS[3], ARGV[5])
  redis.call('HSET', KEYS[4], ARGV[5], ARGV[7])
end
return redis.call('STRLEN', KEYS[2])
"""
#: A list's range or a set's members, each cut to ARGV[1] bytes (a line or a name planted
#: larger than any hero writes never leaves the server whole).
_BOUNDED = """
local items
if ARGV[2] == 'list' then
  items = redis.call('LRANGE', KEYS[1], ARGV[3], ARGV[4])
else
  items = redis.call('SMEMBERS', KEYS[1])
end
local most = tonumber(ARGV[1])
for i, v in ipairs(items) do
  if #v > most then items[i] = string.sub(v, 1, most) end
end
return items
"""
#: The longest lease holder, pending mark or dispatch read (hero writes ~60 bytes).
_SHORT = 256
#: How long the coordinator's word that it has mirrored a run's ending stays.
MIRRORED_TTL_S = 3600
#: How long a refusal note stays for the coordinator to read.
REFUSAL_TTL_S = 24 * 3600
#: Room for a sealed value's header line (hero.engine.seal), beyond the value's own bound.
_HEADER_BYTES = 256
#: The longest progress line (sealed) or file name read.
_ITEM_BYTES = 4 * MAX_LOG_CHARS + _HEADER_BYTES
#: KEYS: the broker's queue lists, then its hash of messages taken but not acknowledged;
#: ARGV: a task id. 1 when a message of the task is in one of them (searched in Redis: a
#: story's payload can be large).
_QUEUED = """
local needle = ARGV[1]
for i = 1, #KEYS - 1 do
  for _, v in ipairs(redis.call('LRANGE', KEYS[i], 0, -1)) do
    if string.find(v, needle, 1, true) then return 1 end
  end
end
for _, v in ipairs(redis.call('HVALS', KEYS[#KEYS])) do
  if string.find(v, needle, 1, true) then return 1 end
end
return 0
"""
#: Progress lines read in one look.
LOG_LINES_PER_LOOK = 1000


class LeaseLost(HeroError):
    """Another worker holds the story now: this one must stop writing and running it."""


class Store:
    """hero's keys in one Redis. What a worker publishes is sealed, and checked when read,
    with ``seal`` (see :meth:`sealed_with`)."""

    def __init__(self, url: str, prefix: str, lease_s: float, seal: Seal | None = None) -> None:
        import redis

        self.redis: redis.Redis = redis.Redis.from_url(
            url, socket_timeout=15, socket_connect_timeout=5, health_check_interval=15
        )
        self.prefix = prefix
        self.lease_ms = max(1000, int(lease_s * 1000))
        self._renew = self.redis.register_script(_RENEW)
        self._release = self.redis.register_script(_RELEASE)
        self._write = self.redis.register_script(_WRITE)
        self._bounded = self.redis.register_script(_BOUNDED)
        self._queued = self.redis.register_script(_QUEUED)
        self.seal = seal

    def sealed_with(self, seal: Seal) -> Store:
        """This store (its connection, its scripts), sealing and checking with ``seal``."""
        other = copy.copy(self)
        other.seal = seal
        return other

    @property
    def _sealer(self) -> Seal:
        if self.seal is None:
            raise RuntimeError("a Store without a seal reads and writes no published value")
        return self.seal

    def key(self, kind: str, story: str, name: str = "") -> str:
        return f"{self.prefix}:{kind}:{story}" + (f":{name}" if name else "")

    # -- the lease -----------------------------------------------------------------------

    def take(self, story: str, owner: str) -> bool:
        return bool(self.redis.set(self.key("lease", story), owner, nx=True, px=self.lease_ms))

    def renew(self, story: str, owner: str) -> str:
        return _text(self._renew(keys=[self.key("lease", story)], args=[owner, self.lease_ms]))

    def release(self, story: str, owner: str) -> None:
        self._release(keys=[self.key("lease", story)], args=[owner])

    def holder(self, story: str) -> str | None:
        return self.short("lease", story)

    def short(self, kind: str, story: str) -> str | None:
        """A short value (a lease's holder, a pending mark, a dispatch), cut to _SHORT."""
        key = self.key(kind, story)
        value = self._guarded(key, lambda: self.redis.getrange(key, 0, _SHORT - 1))
        return _text(value) if value else None

    # -- the pending mark ------------------------------------------------------------------

    def mark_pending(self, story: str, task_id: str) -> None:
        self.redis.set(self.key("pending", story), task_id)

    def clear_pending(self, story: str, dispatch: str | None = None) -> None:
        """Drop the pending mark (only if it is ``dispatch``'s, when given)."""
        if dispatch is None:
            self.redis.delete(self.key("pending", story))
        else:
            self._release(keys=[self.key("pending", story)], args=[dispatch])

    def pending(self, story: str) -> str | None:
        return self.short("pending", story)

    # -- what a worker publishes (under its lease) -----------------------------------------

    def put_state(self, story: str, owner: str, dispatch: str, record: str) -> None:
        self._put(story, owner, dispatch, "state", record)

    def put_story(self, story: str, owner: str, dispatch: str, text: str) -> None:
        self._put(story, owner, dispatch, "story", text)

    def push_log(self, story: str, owner: str, dispatch: str, line: str) -> None:
        sealed = self._sealer.wrap("log", story, dispatch, line[:MAX_LOG_CHARS])
        self._checked(story, owner, self.key("log", story), "push", sealed)

    def put_wip(self, story: str, owner: str, dispatch: str, mark: str) -> None:
        self._put(story, owner, dispatch, "wip", mark)

    def _put(self, story: str, owner: str, dispatch: str, kind: str, value: str) -> None:
        sealed = self._sealer.wrap(kind, story, dispatch, value)
        self._checked(story, owner, self.key(kind, story), "set", sealed)

    def append_file(
        self, story: str, owner: str, name: str, data: bytes, offset: int, seal: str
    ) -> bool:
        """Append ``data`` to the file, whose published length must be ``offset``, its seal
        now ``seal`` (of the whole); False when it is not (the key was lost, or never
        written): then :meth:`set_file`."""
        result = self._write(
            keys=self._file_keys(story, name),
            args=[owner, "append", data, offset, name, self.lease_ms, seal],
        )
        if result == -2:
            raise LeaseLost(story)
        return bool(result != -1)

    def set_file(self, story: str, owner: str, name: str, data: bytes, seal: str) -> None:
        result = self._write(
            keys=self._file_keys(story, name),
            args=[owner, "set", data, 0, name, self.lease_ms, seal],
        )
        if result == -2:
            raise LeaseLost(story)

    def _file_keys(self, story: str, name: str) -> list[str]:
        return [
            self.key("lease", story),
            self.key("file", story, name),
            self.key("files", story),
            self.key("seals", story),
        ]

    def _checked(self, story: str, owner: str, target: str, op: str, value: str) -> None:
        args: list[str | int] = [owner, op, value, 0, "", self.lease_ms]
        if self._write(keys=[self.key("lease", story), target], args=args) == -2:
            raise LeaseLost(story)

    def set_done(self, story: str, owner: str, dispatch: str, status: str, worker: str) -> None:
        """The run of ``dispatch`` is over (``status``): the coordinator may stop waiting.
        Under the lease, like every write a worker makes."""
        record = {"dispatch": dispatch, "status": status, "worker": worker}
        self._put(story, owner, dispatch, "done", json.dumps(record))

    def done(self, story: str) -> dict[str, str]:
        """How the story's last dispatch ended (``dispatch``, ``status``, ``worker``), {}
        while none has; Untrusted for a value not sealed, or not one."""
        sealed = self._sealed("done", story, 4096)
        if sealed is None:
            return {}
        try:
            record = json.loads(sealed.value)
        except ValueError:
            raise Untrusted(f"{self.key('done', story)}: not JSON") from None
        if not isinstance(record, dict) or record.get("dispatch") != sealed.dispatch:
            raise Untrusted(f"{self.key('done', story)}: not the end of its own dispatch")
        dispatch_of(record.get("dispatch"))
        return {k: str(v)[:200] for k, v in record.items() if k in ("dispatch", "status", "worker")}

    def state(self, story: str) -> Sealed | None:
        """The run record a worker last published, its seal checked (Untrusted otherwise);
        whether it is the story's is the reader's check (hero.engine.trust.record_for)."""
        return self._sealed("state", story, MAX_STATE_BYTES)

    def story_text(self, story: str) -> Sealed | None:
        """The story file a worker last published, its seal checked."""
        return self._sealed("story", story, MAX_STORY_BYTES)

    def wip(self, story: str) -> Sealed | None:
        """The last snapshot's mark a worker published, its seal checked; what it says is
        the reader's check (hero.engine.wip.WipMark.parse)."""
        return self._sealed("wip", story, 4096)

    def _sealed(self, kind: str, story: str, limit: int) -> Sealed | None:
        text = self.text(kind, story, limit)
        if text is None:
            return None
        try:
            return self._sealer.unwrap(kind, story, text)
        except Untrusted as exc:
            # which value it was (a reader says each refused value once)
            digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:12]
            raise Untrusted(f"{self.key(kind, story)}: {exc} [value sha256 {digest}]") from None

    # -- what the coordinator (and the next worker) reads: bounded, never trusted -----------

    def text(self, kind: str, story: str, limit: int) -> str | None:
        """The string at ``P:kind:story``, None when there is none; Untrusted when it is
        larger than ``limit`` bytes, or not a string."""
        key = self.key(kind, story)
        most = limit + _HEADER_BYTES  # and the seal's header line
        value = self._guarded(key, lambda: self.redis.getrange(key, 0, most))
        if not value:
            return None
        if len(value) > most:
            raise Untrusted(f"{key}: larger than {limit} bytes")
        return _text(value)

    def file_names(self, story: str) -> list[str]:
        key = self.key("files", story)
        count = self._guarded(key, lambda: int(self.redis.scard(key)))
        if count > MAX_FILES:
            raise Untrusted(f"{key}: more than {MAX_FILES} files")
        names = self._guarded(key, lambda: self._bounded(keys=[key], args=[_ITEM_BYTES, "set"]))
        return sorted({_text(n) for n in names})

    def file_length(self, story: str, name: str) -> int:
        key = self.key("file", story, name)
        return int(self._guarded(key, lambda: self.redis.strlen(key)))

    def file_part(self, story: str, name: str, start: int) -> tuple[bytes, bytes | None]:
        """The file from byte ``start`` on, with its seal, read together (one transaction:
        never a part from one write and a seal from another); Untrusted when the file is
        larger than MAX_FILE_BYTES."""
        key = self.key("file", story, name)
        pipe = self.redis.pipeline(transaction=True)
        pipe.getrange(key, start, MAX_FILE_BYTES)
        pipe.hget(self.key("seals", story), name)
        value, seal = self._guarded(key, pipe.execute)
        data = value.encode("utf-8") if isinstance(value, str) else bytes(value or b"")
        if start + len(data) > MAX_FILE_BYTES:
            raise Untrusted(f"{key}: larger than {MAX_FILE_BYTES} bytes")
        if seal is not None and not isinstance(seal, bytes):
            seal = str(seal).encode("utf-8")
        return data, seal

    def log_lines(self, story: str, start: int) -> list[Sealed | Untrusted]:
        """At most LOG_LINES_PER_LOOK progress lines from line ``start`` on, each sealed
        (or Untrusted saying why not)."""
        key = self.key("log", story)
        end = start + LOG_LINES_PER_LOOK - 1
        found: list[Sealed | Untrusted] = []
        args: list[str | int] = [_ITEM_BYTES, "list", start, end]
        for value in self._guarded(key, lambda: self._bounded(keys=[key], args=args)):
            try:
                found.append(self._sealer.unwrap("log", story, _text(value)))
            except Untrusted as exc:
                found.append(Untrusted(f"{key}: a line: {exc}"))
        return found

    def log_length(self, story: str) -> int:
        key = self.key("log", story)
        return int(self._guarded(key, lambda: self.redis.llen(key)))

    def _guarded(self, key: str, read: Any) -> Any:
        """``read()``; a key of the wrong type (a hash where a string is due, planted) is
        Untrusted, not a broker that is away."""
        import redis.exceptions

        try:
            return read()
        except redis.exceptions.ResponseError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            raise Untrusted(f"{key}: not of the type hero writes there") from None

    def in_broker(self, queues: list[str], unacked: str, task_id: str) -> bool:
        """Whether the task is waiting in one of the broker's ``queues`` or taken and not
        yet acknowledged (``unacked``): keys of Celery's, on this Redis (see
        hero.engine.app.broker_keys)."""
        pipe = self.redis.pipeline(transaction=False)
        for key in queues:
            pipe.llen(key)
        pipe.hlen(unacked)
        if not any(pipe.execute()):  # nothing anywhere: the common case, cheaply
            return False
        return bool(self._queued(keys=[*queues, unacked], args=[task_id]))

    def mark_mirrored(self, story: str, dispatch: str) -> None:
        """The coordinator has the ending of ``dispatch``: its worker may let go (see
        hero.engine.worker._Run._until_mirrored)."""
        self.redis.set(self.key("mirrored", story), dispatch, ex=MIRRORED_TTL_S)

    # -- refusals -----------------------------------------------------------------------------

    def note_refusal(self, story: str, note: str) -> None:
        """Why a worker refused a task of ``story`` (a task it cannot trust cannot end the
        story: this note is all the coordinator hears of it)."""
        self.redis.set(self.key("refused", story), note[:2000], ex=REFUSAL_TTL_S)

    def refusal(self, story: str) -> str | None:
        return self.text("refused", story, 4000)

    def forget(self, story: str) -> None:
        """Drop what was published of a story that ended and was mirrored."""
        try:
            names = self.file_names(story)
        except Untrusted:
            names = []
        self.redis.delete(
            self.key("state", story),
            self.key("story", story),
            self.key("wip", story),
            self.key("log", story),
            self.key("files", story),
            self.key("seals", story),
            *(self.key("file", story, n) for n in names),
        )


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
