"""evalx in a CI job: the pull-request comment posted or updated on GitHub or GitLab, and the baseline run fetched.

- :mod:`evalx.ci.forge`: the HTTP client for GitHub's and GitLab's APIs: the
  token sent only to the API's origin, never after a redirect elsewhere, and
  masked in every message;
- :mod:`evalx.ci.github` and :mod:`evalx.ci.gitlab`: each forge's endpoints
  (a pull request's comments / a merge request's notes; the artifacts a
  baseline comes from), and what its CI job's environment says;
- :mod:`evalx.ci.sticky`: the one comment a pull request keeps, found by its
  marker and updated;
- :mod:`evalx.ci.baseline`: a run folder out of an artifact's zip, only the
  files a baseline needs;
- :mod:`evalx.ci.actions`: GitHub Actions' step outputs and step summary.

The comment's text is :mod:`evalx.reports.comment`'s. Nothing is imported here: a
run that only writes step outputs (:mod:`evalx.ci.actions`) loads no HTTP client.
"""

from __future__ import annotations

__all__: list[str] = []
