"""Authentication of what travels between a coordinator and its workers through Redis:
HMAC-SHA256 with ``engine_key`` (config.local.yaml, or HERO_ENGINE_KEY), a secret the
coordinator and every worker share and no one else holds (it is redacted like any key and
never in a command's environment).

Redis is not trusted (see hero.engine.trust). So:

- **a task** (a story a coordinator sends) carries ``auth``: when it was sent, a nonce, and
  the HMAC of the task's name, those two and its whole payload, serialised canonically
  (sorted keys, no blanks, ASCII). A worker checks it before anything else, with
  ``hmac.compare_digest``, and refuses a task whose HMAC does not match, one sent more than
  :data:`MAX_TASK_AGE_S` ago (a captured task replayed later) and one from a clock more
  than :data:`MAX_CLOCK_SKEW_S` ahead. Within that window a replayed task is stopped by
  the lease and the dispatch rules (see hero.engine.worker): a story runs under one lease,
  a dispatch the coordinator has replaced or that has ended is not run.
- **a value a worker publishes** for the coordinator, or the next worker, to act on (the
  run record, the story file, the progress lines, the end of a dispatch) is sealed: a
  header line ``hero-seal-1 <hmac> <dispatch>`` over its kind, its story, the dispatch
  that wrote it and the value. A published file (traces, verify logs, which grow by
  appends) has the HMAC of its story, name and whole content beside it.

What the seal does not stop: someone with Redis write access can delete hero's keys, or
put back an older sealed value of the same story (a record from a step ago); that costs
steps run again, never a path outside a home or a story the coordinator did not send.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from hero.engine.app import TASK_NAME
from hero.engine.trust import DISPATCH_RE, Untrusted

#: A task sent longer ago than this is refused (a day: generous for a story waiting in the
#: queue behind busy workers; a refused one is sent again by the coordinator, fresh).
MAX_TASK_AGE_S = 24 * 3600
#: How far ahead of a worker's clock the coordinator's may be.
MAX_CLOCK_SKEW_S = 15 * 60
#: The first word of a sealed value's header line.
SEAL_TAG = "hero-seal-1"


@dataclass(frozen=True)
class Sealed:
    """A value a worker published, its seal checked."""

    dispatch: str
    value: str


class Seal:
    """HMACs with one engine key."""

    def __init__(self, key: str) -> None:
        if not key:
            raise ValueError("an engine key is required")
        self._key = key.encode("utf-8")

    def _mac(self, *parts: bytes) -> Any:
        """A fresh HMAC over ``parts``, each preceded by its length (no two lists of parts
        give the same input); more may be fed to it (a file's content)."""
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in parts:
            mac.update(len(part).to_bytes(8, "big") + part)
        return mac

    # -- tasks ------------------------------------------------------------------------------

    def sign_task(self, payload: dict[str, Any], *, now: float | None = None) -> dict[str, Any]:
        """``payload`` with its ``auth``."""
        sent_ms = int((time.time() if now is None else now) * 1000)
        nonce = secrets.token_hex(16)
        mac = self._task_mac(payload, sent_ms, nonce)
        return {**payload, "auth": {"sent_ms": sent_ms, "nonce": nonce, "mac": mac}}

    def _task_mac(self, payload: dict[str, Any], sent_ms: int, nonce: str) -> str:
        body = json.dumps(
            {"task": TASK_NAME, "sent_ms": sent_ms, "nonce": nonce, "payload": payload},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
            allow_nan=False,
        )
        return str(self._mac(b"task", body.encode("ascii")).hexdigest())

    def check_task(self, body: object, *, now: float | None = None) -> dict[str, Any]:
        """The payload of the task ``body``, once its ``auth`` is checked; Untrusted saying
        why it is refused. Nothing of the payload is looked at before its HMAC matched."""
        if not isinstance(body, dict):
            raise Untrusted("not a story task: its argument is not an object")
        auth = body.get("auth")
        if auth is None:
            raise Untrusted(
                "not authenticated: the task carries no `auth` (it was not sent by a hero "
                "coordinator holding the engine key)"
            )
        if (
            not isinstance(auth, dict)
            or not isinstance(auth.get("mac"), str)
            or not isinstance(auth.get("nonce"), str)
            or type(auth.get("sent_ms")) is not int
        ):
            raise Untrusted("not authenticated: its `auth` is malformed")
        payload = {k: v for k, v in body.items() if k != "auth"}
        try:
            expected = self._task_mac(payload, auth["sent_ms"], auth["nonce"])
        except (TypeError, ValueError, RecursionError):
            raise Untrusted("not authenticated: its payload is not plain JSON") from None
        if not hmac.compare_digest(expected.encode(), auth["mac"].encode("utf-8", "replace")):
            raise Untrusted(
                "authentication failed: its HMAC does not match this worker's engine key "
                "(a forged or altered task, or a coordinator whose engine_key differs)"
            )
        age = (time.time() if now is None else now) - auth["sent_ms"] / 1000
        if age > MAX_TASK_AGE_S:
            raise Untrusted(
                f"too old: sent {age / 3600:.1f} h ago, more than {MAX_TASK_AGE_S // 3600} h "
                "(a task replayed, or one that waited that long in the queue: the "
                "coordinator sends the story again)"
            )
        if age < -MAX_CLOCK_SKEW_S:
            raise Untrusted(
                f"sent {-age:.0f} s in this worker's future: the coordinator's clock and this "
                f"worker's differ by more than {MAX_CLOCK_SKEW_S // 60} min (run NTP on both)"
            )
        return payload

    # -- published values ---------------------------------------------------------------------

    def _value_mac(self, kind: str, story: str, dispatch: str, value: str) -> str:
        parts = (b"value", kind.encode(), story.encode(), dispatch.encode(), value.encode())
        return str(self._mac(*parts).hexdigest())

    def wrap(self, kind: str, story: str, dispatch: str, value: str) -> str:
        """``value`` sealed: published as ``kind`` (state, story, log, done) of ``story`` by
        the run of ``dispatch``."""
        mac = self._value_mac(kind, story, dispatch, value)
        return f"{SEAL_TAG} {mac} {dispatch}\n{value}"

    def unwrap(self, kind: str, story: str, text: str) -> Sealed:
        """The value ``text`` seals; Untrusted when it is not sealed, or not by this key
        for this ``kind`` of this ``story``."""
        head, newline, value = text.partition("\n")
        words = head.split(" ")
        if not newline or len(words) != 3 or words[0] != SEAL_TAG:
            raise Untrusted("not sealed: no hero worker published it")
        _, mac, dispatch = words
        if not DISPATCH_RE.fullmatch(dispatch):
            raise Untrusted("not sealed: its dispatch is not one")
        try:
            expected = self._value_mac(kind, story, dispatch, value)
        except UnicodeEncodeError:
            raise Untrusted("its seal does not match") from None
        if not hmac.compare_digest(expected.encode(), mac.encode("utf-8", "replace")):
            raise Untrusted(
                "its seal does not match (forged or altered, or sealed with another engine key)"
            )
        return Sealed(dispatch, value)

    # -- published files ------------------------------------------------------------------------

    def file_mac(self, story: str, name: str) -> Any:
        """The HMAC of file ``name`` of ``story``, to be fed its content (in parts or whole)."""
        return self._mac(b"file", story.encode(), name.encode())

    def seal_file(self, story: str, name: str, data: bytes) -> str:
        mac = self.file_mac(story, name)
        mac.update(data)
        return str(mac.hexdigest())

    @staticmethod
    def matches(mac: Any, seal: bytes | str | None) -> bool:
        """Whether the HMAC ``mac`` (fed its content) is the published ``seal``."""
        if seal is None:
            return False
        given = seal if isinstance(seal, bytes) else seal.encode("utf-8", "replace")
        return hmac.compare_digest(str(mac.hexdigest()).encode(), given)
