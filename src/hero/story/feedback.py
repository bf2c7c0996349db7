"""The reviewer's feedback in the story file: appended under ``## Reviewer Feedback (auto)``
(:func:`append_feedback`, through the one writer, keeping the user's bytes), and kept inert: a
reviewer's text never opens a section of its own (:func:`contain_sections`,
:func:`demote_headings`). A story file is in others' reach while its story runs: it is written
back only while it is still the regular file hero read (never through a symlink; with
``expect``, the very file of :attr:`Story.file_id`), else :class:`StoryFileChanged`."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from hero.story.body import FEEDBACK_KEY, ROUND_RE, Heading, fence_step, scan_headings, sections_of
from hero.story.format import (
    FILE_WHAT,
    READ_FLAGS,
    Layout,
    decode_story,
    layout_of,
    normalize_newlines,
    os_reason,
    read_open,
    render_post,
    story_handler,
)
from hero.story.record import FEEDBACK_HEADING, FileId, StoryError, StoryFileChanged
from hero.yamlio import (
    ValueProblem,
    _check_kind,
)

# ----------------------------------------------------------------------------- feedback


def append_feedback(path: Path, round_no: int, text: str, *, expect: FileId | None = None) -> bool:
    """Append reviewer feedback for ``round_no`` to the story file.

    Adds the ``## Reviewer Feedback (auto)`` heading when the file's last section is not
    already that heading, then ``### Round N`` and ``text``. Returns False (and writes
    nothing) when ``### Round N`` is already under a feedback heading.

    The file is rewritten atomically by the story writer (:func:`_rewritten`, then a new
    file renamed over it), and only grows: every byte the user wrote stays as it was
    (frontmatter text, key order, comments, BOM, line endings); the feedback uses the file's
    line ending style.

    Headings of level 1-3 inside ``text`` are demoted to level 4 (outside code fences) and an
    unclosed code fence is closed, so the appended feedback cannot break the file's sections.

    The story file is in others' reach while a story runs: someone may swap it for a symlink
    to another file (``config.local.yaml``, ``~/.bashrc``) or for another file. It is read
    without following a symlink at its last component, and written only if it is still the
    regular file read, checked once more right before the rename; with ``expect`` (a
    :attr:`Story.file_id`), it must also be that file. Otherwise nothing is written and
    :class:`StoryFileChanged` says what is there now. The file behind a link is never
    written. See :func:`write_feedback` for the file's identity after the write.
    """
    return write_feedback(path, round_no, text, expect=expect).appended


@dataclass(frozen=True)
class FeedbackWrite:
    """What :func:`write_feedback` did."""

    appended: bool  # False: that round's feedback was in the file already; nothing written
    file_id: FileId  # the story file's identity now: the new file when appended


def write_feedback(
    path: Path, round_no: int, text: str, *, expect: FileId | None = None
) -> FeedbackWrite:
    """:func:`append_feedback`, also giving the story file's identity afterwards: each
    append renames a new file over the old one (a new inode), so the ``expect`` of the next
    round is this call's ``file_id``."""
    path = Path(path)
    if isinstance(round_no, bool) or not isinstance(round_no, int) or round_no < 0:
        raise ValueError(f"round_no must be a whole number >= 0, got {round_no!r}")
    try:
        # the directory as named (a story may live under a symlinked directory); the file
        # itself is opened in it without following a link, and replaced in that very one
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StoryError(path, "file", f"cannot read the file: {os_reason(exc)}") from None
    try:
        raw, info = _read_for_rewrite(dir_fd, path, expect)
        new_body = _with_feedback(decode_story(raw, path), round_no, text)
        if new_body is None:
            return FeedbackWrite(False, (info.st_dev, info.st_ino))
        new_id = _replace_story_file(dir_fd, path, _rewritten(path, raw, new_body), info)
    finally:
        os.close(dir_fd)
    return FeedbackWrite(True, new_id)


def _with_feedback(content: str, round_no: int, text: str) -> str | None:
    """The story's body (LF) with the feedback of ``round_no`` appended; None when that
    round is under a feedback heading already."""
    normalized = normalize_newlines(content)
    try:
        body = layout_of(normalized).body
    except ValueProblem:  # no frontmatter hero can cut: the whole text is the body
        body = normalized
    lines = body.split("\n")
    headings, open_fence = scan_headings(lines)

    rounds: set[int] = set()
    last_top: Heading | None = None
    for h, end in sections_of(lines, headings):
        last_top = h
        if h.key != FEEDBACK_KEY:
            continue
        for sub in headings:
            if h.index < sub.index < end and sub.level == 3:
                m = ROUND_RE.match(sub.key)
                if m:
                    rounds.add(int(m.group(1)))
    if round_no in rounds:
        return None

    parts: list[str] = []
    if normalized and not normalized.endswith("\n"):
        parts.append("\n")
    if open_fence is not None:
        parts.append(open_fence + "\n")
    if last_top is None or last_top.key != FEEDBACK_KEY or open_fence is not None:
        parts.append(("\n" if normalized else "") + FEEDBACK_HEADING + "\n")
    parts.append(f"\n### Round {round_no}\n\n{_sanitize_feedback(text)}\n")
    return body + "".join(parts)


def _read_for_rewrite(
    dir_fd: int, path: Path, expect: FileId | None
) -> tuple[bytes, os.stat_result]:
    """The story file's bytes and fstat, opened in ``dir_fd`` without following a link:
    StoryFileChanged unless it is a regular file (and, with ``expect``, that very file)."""
    name = path.name
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise _changed(path, dir_fd, expect is not None)
        if not stat.S_ISREG(st.st_mode):  # a FIFO, a device: never opened
            _check_kind(st.st_mode, FILE_WHAT)
        try:
            fd = os.open(name, READ_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):  # a link swapped in since the stat
                raise _changed(path, dir_fd, True) from None
            raise
        try:
            info, data = read_open(fd)
        finally:
            os.close(fd)
    except ValueProblem as exc:
        if expect is not None:
            raise StoryFileChanged(
                path, f"is no longer the file hero read: {exc.message}"
            ) from None
        raise StoryError(path, "file", exc.message) from None
    except FileNotFoundError as exc:
        if expect is not None:
            raise StoryFileChanged(path, "is gone") from None
        raise StoryError(path, "file", f"cannot read the file: {os_reason(exc)}") from None
    except OSError as exc:
        raise StoryError(path, "file", f"cannot read the file: {os_reason(exc)}") from None
    if expect is not None and (info.st_dev, info.st_ino) != tuple(expect):
        raise StoryFileChanged(path, "is a different file than the one hero read")
    return data, info


def _changed(path: Path, dir_fd: int, now: bool) -> StoryFileChanged:
    """The error for a story file that is a symlink (``now``: it was not when hero read it)."""
    try:
        target = f" (to {os.readlink(path.name, dir_fd=dir_fd)})"
    except OSError:
        target = ""
    if now:
        return StoryFileChanged(path, f"is now a symlink{target}")
    return StoryFileChanged(path, f"is a symlink{target}; hero does not write through links")


def _replace_story_file(dir_fd: int, path: Path, data: bytes, read: os.stat_result) -> FileId:
    """Write ``data`` to a new dot-file in ``dir_fd`` (the inbox ignores dot-files), flush
    it, check that ``path`` is still the file ``read`` described, and rename the new file
    over it: a reader sees the old file or the new one, never half. The rename replaces the
    directory entry; it never writes into whatever the entry points to. The new file's
    identity."""
    name = path.name
    while True:
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o666,
                dir_fd=dir_fd,
            )
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise StoryError(path, "file", f"cannot write the file: {os_reason(exc)}") from None
    try:
        try:
            os.fchmod(fd, stat.S_IMODE(read.st_mode))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            written = os.fstat(fd)
        finally:
            os.close(fd)
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise StoryFileChanged(path, "is gone") from None
        if stat.S_ISLNK(now.st_mode):
            raise _changed(path, dir_fd, True)
        if (now.st_dev, now.st_ino) != (read.st_dev, read.st_ino):
            raise StoryFileChanged(path, "is a different file than the one hero read")
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        if isinstance(exc, OSError):
            raise StoryError(path, "file", f"cannot write the file: {os_reason(exc)}") from None
        raise
    with contextlib.suppress(OSError):  # not every file system can sync a directory
        os.fsync(dir_fd)
    return (written.st_dev, written.st_ino)


def _rewritten(path: Path, raw: bytes, new_body: str) -> bytes:
    """The bytes of the story file whose bytes were ``raw`` with ``new_body`` (LF) as its body.

    The text comes from :func:`render_post` (``frontmatter.dumps``), with the file's own YAML
    text, delimiter lines, line endings and BOM handed back to it, so that a file hero can
    read comes out with its frontmatter byte for byte as the user wrote it. Where rendering
    would still change the user's bytes (mixed or lone-CR line endings, a frontmatter hero
    cannot read), the original frontmatter block is kept verbatim instead: only the body
    changes. ``new_body`` must start with the old body: append_feedback only appends.
    """
    import frontmatter

    content = decode_story(raw, path)
    crlf = "\r\n" in content
    bom = raw.startswith(b"\xef\xbb\xbf")
    normalized = normalize_newlines(content)

    def encode(text: str) -> bytes:
        return (text.replace("\n", "\r\n") if crlf else text).encode("utf-8")

    data: bytes | None = None
    try:
        layout: Layout | None = layout_of(normalized)
    except ValueProblem:
        layout = None
    if layout is not None:
        handler = story_handler(layout.fm_text)
        try:
            meta = handler.load(layout.fm_text)
        except ValueProblem:
            meta = None
        if isinstance(meta, dict):
            post = frontmatter.Post(new_body, handler)
            post.metadata = meta
            text = render_post(post, open_line=layout.open_line, close_line=layout.close_line)
            data = (b"\xef\xbb\xbf" if bom else b"") + encode(text)
    old_body = layout.body if layout is not None else normalized
    if not new_body.startswith(old_body):
        raise ValueError("the new body must start with the story's current body")
    appended = raw + encode(new_body[len(old_body) :])
    uniform = encode(normalized) == raw.removeprefix(b"\xef\xbb\xbf")  # one kind of line end
    if data is None or not uniform:
        data = appended  # rendering would change what the user wrote: keep their bytes
    return data


def _sanitize_feedback(text: str) -> str:
    text = normalize_newlines(str(text)).strip("\n").rstrip()
    if not text.strip():
        return "(no feedback text)"
    return contain_sections(text)


def contain_sections(text: str) -> str:
    """``text`` made safe to put inside a story section: headings of level 1-3 demoted in
    every form (:func:`demote_headings`) and an unclosed fence closed, so that nothing in it
    can open a section (``## Acceptance Criteria``, the feedback heading) or hide the ones
    after, for hero's parser or for a person reading it rendered."""
    out = demote_headings(text).split("\n")
    fence: str | None = None
    for line in out:
        fence, _ = fence_step(line, fence)
    if fence is not None:
        out.append(fence)
    return "\n".join(out)


#: What may stand before a heading's ``#`` (or a setext heading's text) and leave it a
#: heading to a markdown renderer: indentation and the markers of block quotes and list
#: items, nested (``> - ## X``). Any indentation: a line of an indented code block that
#: looks like a heading is demoted too, which changes it by two ``#``.
_CONTAINER = r"(?:[ \t]*(?:>|[-*+](?=[ \t])|\d{1,9}[.)](?=[ \t])))*[ \t]*"
_CONTAINER_RE = re.compile(_CONTAINER)
_ATX_RE = re.compile(rf"^({_CONTAINER})(#{{1,6}})(?=[ \t]|$)")
#: A setext heading's underline (``===`` level 1, ``---`` level 2), in block quotes or
#: indented; a list marker in front of it starts an item instead.
_UNDERLINE_RE = re.compile(r"^[ \t>]*(?:=+|-+)[ \t]*$")
#: A thematic break (``---``, ``* * *``, ``___``): no paragraph, so nothing to underline.
_RULE_RE = re.compile(rf"^{_CONTAINER}(?:(?:-[ \t]*){{3,}}|(?:\*[ \t]*){{3,}}|(?:_[ \t]*){{3,}})$")
#: The start of an HTML heading tag of level 1-3, opening or closing (``<h2>``, ``</H1>``,
#: ``<h3 class=x>``, also split over lines).
_HTML_HEADING_RE = re.compile(r"<(/?h[1-3])(?=[\s/>]|$)", re.IGNORECASE)


def demote_headings(text: str) -> str:
    """``text`` (markdown) with no heading of level 1-3 in any form a markdown renderer or
    hero's story parser knows, outside code fences, its words kept:

    - ATX (``## X``), also in block quotes and list items (``> ## X``, ``- ## X``,
      ``1. ## X``) and indented: level 4 (``#### X``);
    - setext (a line of text over ``===`` or ``---``): the text line made a level-4 ATX
      heading (``#### X``), the underline left below it (a rule or a line of ``=``);
    - HTML (``<h2>X</h2>``, any case, with attributes): the tags' ``<`` written as
      ``&lt;``, so that they show as text.

    Levels 4-6 are left as they are: hero's sections are level 2 (rounds of feedback
    level 3). :func:`contain_sections` then closes a fence left open."""
    out: list[str] = []
    fence: str | None = None
    text_line: int | None = None  # the line of ``out`` an underline would make a heading
    for line in text.split("\n"):
        fence, is_fence = fence_step(line, fence)
        if is_fence or fence is not None:
            out.append(line)
            text_line = None
            continue
        line = _HTML_HEADING_RE.sub(r"&lt;\1", line)
        atx = _ATX_RE.match(line)
        if atx is not None:
            if len(atx.group(2)) <= 3:
                line = f"{atx.group(1)}####{line[atx.end() :]}"
            text_line = None
        elif text_line is not None and _UNDERLINE_RE.match(line):
            before = out[text_line]
            cut = _CONTAINER_RE.match(before)
            at = cut.end() if cut is not None else 0
            out[text_line] = f"{before[:at]}#### {before[at:]}"
            text_line = None
        elif not line.strip(" \t>") or _RULE_RE.match(line):
            text_line = None
        else:
            text_line = len(out)
        out.append(line)
    return "\n".join(out)
