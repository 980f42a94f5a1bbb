"""``evalx comment``: a run's pull-request comment rendered, and posted to GitHub or GitLab, or printed.

:func:`comment_for_run` renders it from the run folder (and a baseline run,
else the comparison the run stored); :func:`publish` posts or updates the
one comment on the job's pull request (:mod:`evalx.ci.sticky`), or says why
it did not: no token (the Markdown is printed instead), not a pull request,
a fork's pull request whose token may not write (GitHub: then a note goes
to the step summary, which has the run's summary already).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from evalx.ci.actions import append_step_summary
from evalx.ci.github import GitHubJob, GitHubThread
from evalx.ci.gitlab import TOKEN_VARIABLE, GitLabJob, GitLabThread
from evalx.ci.sticky import Posted, post_comment
from evalx.common.reading import SUMMARY, stored_json
from evalx.errors import EvalxError, RunNotFound
from evalx.reports.comment import comment_markdown, marker
from evalx.results.compare import compare_runs
from evalx.results.display import one_line
from evalx.results.model import RunSummary

__all__ = ["Publication", "comment_for_run", "publish"]

log = logging.getLogger(__name__)


def comment_for_run(
    run_dir: Path, *, baseline: Path | None = None, artifact_url: str | None = None, comment_id: str = "", note: str | None = None
) -> str:
    """The comment's Markdown for the run in ``run_dir`` (compared with ``baseline`` when given, else as the run was)."""
    stored = stored_json(run_dir / "summary.json", SUMMARY)
    if not isinstance(stored, dict) or "totals" not in stored:
        raise RunNotFound(f"{run_dir}: no summary.json (an unfinished run? `evalx report {run_dir}` writes it)")
    summary = cast("RunSummary", stored)
    comparison = compare_runs(baseline, run_dir) if baseline is not None else None
    try:
        return comment_markdown(summary, comparison=comparison, artifact_url=artifact_url, comment_id=comment_id, note=note)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:  # a summary.json of another shape (edited, restored)
        raise EvalxError(
            f"{run_dir / 'summary.json'}: not a summary this evalx can read ({type(exc).__name__}: {one_line(str(exc))[:200]}); "
            f"`evalx report {run_dir}` writes it again"
        ) from None


@dataclass(frozen=True)
class Publication:
    """What :func:`publish` did: ``posted`` (or None: not posted) and the Markdown to print when it was not."""

    posted: Posted
    markdown: str | None


def publish(
    run_dir: Path,
    forge: str,
    *,
    baseline: Path | None = None,
    artifact_url: str | None = None,
    comment_id: str = "",
    number: int | None = None,
) -> Publication:
    """Post or update the comment of the run on the current job's pull request (``forge``: ``github`` or ``gitlab``)."""
    if forge == "github":
        return _github(run_dir, baseline=baseline, artifact_url=artifact_url, comment_id=comment_id, number=number)
    if forge == "gitlab":
        return _gitlab(run_dir, baseline=baseline, artifact_url=artifact_url, comment_id=comment_id, number=number)
    raise EvalxError(f"--post {forge}: github or gitlab")


def _github(run_dir: Path, *, baseline: Path | None, artifact_url: str | None, comment_id: str, number: int | None) -> Publication:
    job = GitHubJob.from_env()
    url = artifact_url or job.run_url()
    text = comment_for_run(run_dir, baseline=baseline, artifact_url=url, comment_id=comment_id)
    number = number if number is not None else job.pull_request
    if not job.token:
        return Publication(Posted("skipped", note="no GITHUB_TOKEN: the comment is printed, not posted"), text)
    if number is None:
        return Publication(Posted("skipped", note="not a pull request (no pull_request in the event): nothing to comment on"), None)
    if job.fork:
        posted = Posted(
            "skipped", note=f"pull request #{number} comes from a fork: its token may not comment; the result is in the job summary"
        )
    else:

        async def go() -> Posted:
            async with job.client() as api:
                return await post_comment(GitHubThread(api, job, number), text, marker(comment_id))

        posted = asyncio.run(go())
    if posted.action == "skipped" and posted.note:
        append_step_summary(f"> ℹ️ {posted.note}")
    return Publication(posted, None)


def _gitlab(run_dir: Path, *, baseline: Path | None, artifact_url: str | None, comment_id: str, number: int | None) -> Publication:
    job = GitLabJob.from_env()
    text = comment_for_run(run_dir, baseline=baseline, artifact_url=artifact_url or job.artifacts_url(), comment_id=comment_id)
    number = number if number is not None else job.merge_request
    if not job.token:
        return Publication(Posted("skipped", note=f"no {TOKEN_VARIABLE}: the note is printed, not posted"), text)
    if number is None:
        return Publication(Posted("skipped", note="not a merge request pipeline (no CI_MERGE_REQUEST_IID): nothing to comment on"), None)

    async def go() -> Posted:
        async with job.client() as api:
            return await post_comment(GitLabThread(api, job, number), text, marker(comment_id))

    return Publication(asyncio.run(go()), None)
