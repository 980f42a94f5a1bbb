"""Request authentication beyond a key in a header: a provider definition's ``auth: {kind: ...}``.

* ``bearer_from_command``: a command (``gcloud auth print-access-token``,
  ``az account get-access-token --query accessToken -o tsv``) prints a token, sent as
  ``Authorization: Bearer TOKEN`` and kept for ``ttl_s`` seconds (default 600) before the
  command runs again.
* ``google``: Application Default Credentials through the ``google-auth`` package
  (``evalx-runner[google]``), refreshed when expired.

A kept token the server refuses (HTTP 401) is refreshed at once (:meth:`RequestAuth.refresh`:
the command runs again, the Google credentials are refreshed), once for all the requests
that were refused with it; the provider target sends each refused request again once.
* ``sigv4``: AWS Signature Version 4 through ``botocore`` (``evalx-runner[aws]``) over each
  request's exact method, URL, headers and body bytes; credentials from botocore's chain.

Every token, key and session token is registered with the run's redactor as soon as it is
known; the headers these add are never part of a target's recorded headers nor of its cache
key (:class:`RequestAuth` hands them out per request only). A failure is one line.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from evalx.errors import ConfigError, TargetError

if TYPE_CHECKING:
    from evalx.targets.definitions import ProviderDefinition

log = logging.getLogger(__name__)

#: the scope Vertex AI and most Google Cloud APIs accept
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
#: how long a token command may take
COMMAND_TIMEOUT_S = 60.0
#: a stderr line longer than this is cut in messages
_MAX_LINE = 300


class RequestAuth(Protocol):
    """Adds credentials to one request, right before it is sent (each retry again)."""

    async def prepare(self) -> None:
        """Fetch credentials once before the first request: a failure is the run's one-line error."""

    async def sign(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None) -> dict[str, str]:
        """The headers to send: ``headers`` plus the credentials."""

    async def refresh(self, sent: Mapping[str, str]) -> bool:
        """The server refused the credentials in ``sent`` (the headers :meth:`sign` gave) with HTTP 401: get new
        ones, unless another request did since; whether sending the request again may help."""


def _bearer(sent: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header in ``sent``."""
    value = next((v for k, v in sent.items() if k.lower() == "authorization"), None)
    return value[len("Bearer ") :] if value is not None and value.startswith("Bearer ") else None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:_MAX_LINE]
    return ""


class CommandBearer:
    """``kind: bearer_from_command``: the command's stdout, stripped, is the bearer token."""

    def __init__(self, command: tuple[str, ...], ttl_s: float, secret: Callable[[str], None], where: str) -> None:
        self.command = command
        self.ttl_s = ttl_s
        self.secret = secret
        self.where = where
        self._token: str | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()

    @property
    def shown(self) -> str:
        return " ".join(self.command)

    async def _run(self) -> str:
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
        except OSError as exc:
            raise TargetError(f"{self.where}: cannot run the auth command `{self.shown}`: {exc.strerror or exc}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), COMMAND_TIMEOUT_S)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise TargetError(f"{self.where}: the auth command `{self.shown}` took more than {COMMAND_TIMEOUT_S:g} s") from None
        token = out.decode("utf-8", "replace").strip()
        if token:
            self.secret(token)  # before any message could show it
        if proc.returncode != 0:
            said = _first_line(err.decode("utf-8", "replace"))
            raise TargetError(
                f"{self.where}: the auth command `{self.shown}` failed (exit status {proc.returncode})" + (f": {said}" if said else "")
            )
        if not token or len(token.splitlines()) != 1:
            raise TargetError(f"{self.where}: the auth command `{self.shown}` printed no token (one line expected)")
        return token

    async def token(self) -> str:
        async with self._lock:
            if self._token is None or time.monotonic() >= self._expires:
                self._token = await self._run()
                self._expires = time.monotonic() + self.ttl_s
            return self._token

    async def prepare(self) -> None:
        await self.token()

    async def sign(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None) -> dict[str, str]:
        return {**headers, "Authorization": f"Bearer {await self.token()}"}

    async def refresh(self, sent: Mapping[str, str]) -> bool:
        async with self._lock:
            if self._token is None or _bearer(sent) == self._token:  # not refreshed since: run the command again
                self._token = await self._run()
                self._expires = time.monotonic() + self.ttl_s
                log.info("%s: the server refused the token; the auth command gave a new one", self.where)
        return True


def _missing(kind: str, package: str, extra: str, where: str) -> ConfigError:
    return ConfigError(f"{where}: auth kind {kind} needs the {package} package: install evalx-runner[{extra}]")


class GoogleADC:
    """``kind: google``: Application Default Credentials (``gcloud auth application-default login``,
    ``GOOGLE_APPLICATION_CREDENTIALS``, the metadata server), refreshed when expired."""

    def __init__(self, scopes: tuple[str, ...], secret: Callable[[str], None], where: str) -> None:
        try:
            import google.auth
            import google.auth.exceptions
            import google.auth.transport.requests
        except ImportError:
            raise _missing("google", "google-auth", "google", where) from None
        self.where = where
        self.secret = secret
        self._google = google
        try:
            self.credentials, self.project = google.auth.default(scopes=list(scopes or (CLOUD_PLATFORM,)))
        except google.auth.exceptions.GoogleAuthError as exc:
            raise ConfigError(f"{where}: no Google credentials: {_first_line(str(exc))}") from None
        self._lock = asyncio.Lock()

    def _refresh(self) -> None:
        request = self._google.auth.transport.requests.Request()
        self.credentials.refresh(request)  # type: ignore[no-untyped-call]

    async def token(self, *, refused: str | None = None) -> str:
        """The access token, refreshed when expired, or when it is still ``refused`` (a token a server refused)."""
        async with self._lock:
            creds: Any = self.credentials
            if not creds.valid or (refused is not None and creds.token == refused):
                try:
                    await asyncio.to_thread(self._refresh)
                except Exception as exc:  # google-auth raises its own errors and transport ones
                    raise TargetError(f"{self.where}: refreshing the Google credentials failed: {_first_line(str(exc))}") from None
            token = str(creds.token or "")
            if not token:
                raise TargetError(f"{self.where}: the Google credentials gave no access token")
            self.secret(token)
            return token

    async def prepare(self) -> None:
        await self.token()

    async def sign(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None) -> dict[str, str]:
        return {**headers, "Authorization": f"Bearer {await self.token()}"}

    async def refresh(self, sent: Mapping[str, str]) -> bool:
        await self.token(refused=_bearer(sent) or "")
        return True


#: by auth kind: the variables a target without ``region:`` reads, the first one set winning
REGION_VARIABLES: dict[str, tuple[str, ...]] = {"sigv4": ("AWS_REGION", "AWS_DEFAULT_REGION"), "google": ("GOOGLE_CLOUD_LOCATION",)}
#: by auth kind: a region to start from (``evalx init --provider``)
EXAMPLE_REGIONS = {"sigv4": "us-east-1", "google": "us-central1"}
#: by auth kind: the package extra it needs
AUTH_EXTRAS = {"google": "evalx-runner[google]", "sigv4": "evalx-runner[aws]"}


def aws_region(region: str | None) -> str | None:
    """The target's ``region:``, else ``AWS_REGION``, else ``AWS_DEFAULT_REGION``."""
    return region or default_region("sigv4")


def default_region(kind: str) -> str | None:
    """The region of a target that sets no ``region:``: sigv4's AWS variables, google's ``GOOGLE_CLOUD_LOCATION``."""
    for name in REGION_VARIABLES.get(kind, ()):
        value = os.environ.get(name)
        if value:
            return value
    return None


class SigV4:
    """``kind: sigv4``: each request signed by botocore's SigV4 signer for ``service`` in ``region``."""

    def __init__(self, service: str, region: str | None, secret: Callable[[str], None], where: str) -> None:
        try:
            from botocore.auth import SigV4Auth
            from botocore.awsrequest import AWSRequest
            from botocore.session import get_session
        except ImportError:
            raise _missing("sigv4", "botocore", "aws", where) from None
        found = aws_region(region)
        if not found:
            raise ConfigError(f"{where}: auth kind sigv4 needs a region: set the target's region or AWS_REGION")
        self.service = service
        self.region = found
        self.where = where
        self.secret = secret
        self._auth_class = SigV4Auth
        self._request_class = AWSRequest
        try:
            self.credentials = get_session().get_credentials()
        except Exception as exc:  # botocore's chain reads files and may call out: its errors vary
            raise ConfigError(f"{where}: reading AWS credentials failed: {_first_line(str(exc))}") from None
        if self.credentials is None:
            raise ConfigError(
                f"{where}: no AWS credentials found (botocore's chain: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                "AWS_PROFILE and ~/.aws, SSO, instance roles)"
            )

    def _frozen(self) -> Any:
        frozen = self.credentials.get_frozen_credentials()  # refreshes temporary credentials when near expiry
        for value in (frozen.secret_key, frozen.token, frozen.access_key):
            if value:
                self.secret(value)
        return frozen

    async def prepare(self) -> None:
        try:
            self._frozen()
        except Exception as exc:
            raise ConfigError(f"{self.where}: reading AWS credentials failed: {_first_line(str(exc))}") from None

    def sign_now(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None) -> dict[str, str]:
        """The headers with ``Authorization``, ``X-Amz-Date`` (and ``X-Amz-Security-Token``) over this exact request."""
        import yarl

        sent = str(yarl.URL(url))  # the URL as aiohttp sends it (requoted): what the server checks the signature over
        request = self._request_class(method=method, url=sent, data=body or b"", headers=dict(headers))
        self._auth_class(self._frozen(), self.service, self.region).add_auth(request)
        return {str(k): str(v) for k, v in request.headers.items()}

    async def sign(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None) -> dict[str, str]:
        try:
            refresh_needed = getattr(self.credentials, "refresh_needed", None)
            if refresh_needed is not None and refresh_needed():  # temporary credentials near expiry: STS/SSO off the loop
                await asyncio.to_thread(self._frozen)
            return self.sign_now(method, url, headers, body)
        except Exception as exc:  # expired SSO session, a failing credential_process...
            raise TargetError(f"{self.where}: signing the request failed: {_first_line(str(exc))}") from None

    async def refresh(self, sent: Mapping[str, str]) -> bool:
        return False  # each request is signed afresh already: a 401 is not a stale token


#: what a 401/403 tells the user to check, by auth kind
AUTH_HINTS = {
    "bearer_from_command": "the token the auth command prints",
    "google": "the Google Application Default Credentials (gcloud auth application-default login)",
    "sigv4": "the AWS credentials (botocore's chain), the region, and that the account has access to the model",
}


def make_auth(definition: ProviderDefinition, region: str | None, secret: Callable[[str], None], where: str) -> RequestAuth:
    """The :class:`RequestAuth` of ``definition``'s ``auth:`` (a kind other than header); ``secret`` registers what it learns."""
    spec = definition.auth
    if spec.kind == "bearer_from_command":
        return CommandBearer(spec.command, spec.ttl_s, secret, where)
    if spec.kind == "google":
        return GoogleADC(spec.scopes, secret, where)
    if spec.kind == "sigv4":
        return SigV4(spec.service, region, secret, where)
    raise ConfigError(f"{where}: unknown auth kind {spec.kind!r} ({definition.where('auth', 'kind')})")
