"""The one comment evalx keeps on a pull request: found by its hidden marker and updated, else created.

Each forge (:mod:`evalx.ci.github`, :mod:`evalx.ci.gitlab`) gives a
:class:`Thread`: the comments of one pull or merge request, and how to
create or update one. :func:`upsert` is the same for both: the first
comment whose body starts with the marker *and* that evalx could have
written — a bot's, or the token's own user's when the forge says who that
is — is updated; none, and one is created. A person's comment that starts
with the marker (quoted, or planted) is never overwritten. A comment that
cannot be updated (deleted meanwhile: 404) is replaced by a new one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from evalx.errors import ForgeError

__all__ = ["Comment", "Posted", "Thread", "post_comment", "upsert"]


@dataclass(frozen=True)
class Comment:
    """A comment of the thread, as far as finding evalx's own goes."""

    id: int
    body: str
    by_bot: bool
    #: the author's login or username, when the forge gives one
    author: str | None = None


@dataclass(frozen=True)
class Posted:
    """What ``evalx comment --post`` did: ``created`` or ``updated`` (``url``: the comment's), or ``skipped`` with a ``note``."""

    action: str
    url: str | None = None
    note: str | None = None


class Thread(Protocol):
    """The comments of one pull request or merge request."""

    #: "pull request #12", "merge request !3": what messages call it
    name: str

    def comments(self) -> AsyncIterator[Comment]:
        """Every comment, oldest first (every page)."""
        ...

    async def me(self) -> str | None:
        """The login of the token's user, None when the forge will not say (GitHub's ``GITHUB_TOKEN``: a bot)."""
        ...

    async def create(self, body: str) -> str | None:
        """Add a comment; its URL when the forge gives one."""
        ...

    async def update(self, comment_id: int, body: str) -> str | None:
        """Replace a comment's body; its URL when the forge gives one."""
        ...


async def upsert(thread: Thread, body: str, marker: str) -> Posted:
    """Update evalx's comment on ``thread`` (the one whose body starts with ``marker``) to ``body``, or create it."""
    me = await thread.me()
    found: Comment | None = None
    async for comment in thread.comments():
        ours = comment.by_bot or (me is not None and comment.author == me)
        if ours and comment.body.lstrip().startswith(marker):
            found = comment
            break
    if found is not None:
        try:
            return Posted("updated", await thread.update(found.id, body))
        except ForgeError as exc:
            if exc.status != 404:  # gone since it was listed: a new one below
                raise
    return Posted("created", await thread.create(body))


async def post_comment(thread: Thread, body: str, marker: str) -> Posted:
    """:func:`upsert`, with a token that may not write (a fork's pull request: 403) as a skip with a note, not an error."""
    try:
        return await upsert(thread, body, marker)
    except ForgeError as exc:
        if exc.status == 403:
            return Posted("skipped", note=f"evalx could not comment on the {thread.name}: the token may not write there ({exc})")
        raise
