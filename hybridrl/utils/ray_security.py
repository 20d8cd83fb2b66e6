"""Network hardening of the single-machine Ray cluster ``init_ray`` starts (not of a joined cluster).

Two measures, both applied only when hybridrl starts its own local cluster:

* **Loopback only.** Ray binds its gRPC servers (GCS, raylet, object manager, core workers, agents)
  to the node's advertised IP, which ``ray.init`` resolves to the machine's network address even when
  asked for ``127.0.0.1``. Ray resolves it to the loopback address instead while its
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` switch (``ray_constants.ENABLE_RAY_CLUSTER``) is off, so
  :func:`loopback_only_node` turns that switch off around ``ray.init`` and restores it afterwards
  (a later join of a remote cluster from this process still resolves its own address normally).
* **Token authentication.** When the installed Ray has token auth (``RAY_AUTH_MODE=token``, Ray >=
  2.5x) and the user did not choose a mode, :func:`enable_local_token_auth` sets ``RAY_AUTH_MODE=token``
  and a fresh random ``RAY_AUTH_TOKEN`` (32 bytes, per run) in this process's environment: the daemons
  and workers inherit it, no token file is written, and a client without the token is refused.
  An explicit ``RAY_AUTH_MODE`` in the environment (e.g. ``disabled``) is respected.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Iterator

logger = logging.getLogger(__name__)

AUTH_MODE_ENV = "RAY_AUTH_MODE"
AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
_CLUSTER_SWITCH_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

# The token this module generated last (a later local run replaces it; a user-set token is never replaced).
_generated_token: str | None = None


def ray_supports_token_auth() -> bool:
    """True if the installed Ray has token authentication (``ray._raylet.AuthenticationTokenLoader``)."""
    try:
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]  # noqa: F401
    except ImportError:
        return False
    return True


def _user_chose_auth_mode() -> bool:
    """An ``RAY_AUTH_MODE`` the user set (not the ``token`` this module set for an earlier run)."""
    mode = os.environ.get(AUTH_MODE_ENV)
    if mode is None:
        return False
    return not (mode == "token" and _generated_token is not None and os.environ.get(AUTH_TOKEN_ENV) == _generated_token)


def enable_local_token_auth() -> str | None:
    """Turn token auth on for the local cluster about to start; return the token (None: auth stays off).

    Off when Ray lacks token auth (a warning) or the user set ``RAY_AUTH_MODE`` (respected as is).
    """
    global _generated_token
    if _user_chose_auth_mode():
        if os.environ[AUTH_MODE_ENV] != "token":
            logger.warning("Ray token authentication is off (%s=%s set by the user): any process that can "
                           "reach the cluster's ports can run code in it", AUTH_MODE_ENV, os.environ[AUTH_MODE_ENV])
        return os.environ.get(AUTH_TOKEN_ENV)
    if not ray_supports_token_auth():
        logger.warning("the installed Ray has no token authentication; the local cluster listens on 127.0.0.1 "
                       "only, but any local user can still reach it")
        return None
    _generated_token = secrets.token_hex(32)
    os.environ[AUTH_MODE_ENV] = "token"
    os.environ[AUTH_TOKEN_ENV] = _generated_token
    _refresh_ray_auth_caches()
    return _generated_token


def _refresh_ray_auth_caches() -> None:
    """Make this process see the new mode and token (Ray caches both on first use)."""
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@contextlib.contextmanager
def loopback_only_node() -> Iterator[None]:
    """Within the block, a new local Ray node advertises (and so binds) 127.0.0.1 only."""
    from ray._private import ray_constants

    saved_env = os.environ.get(_CLUSTER_SWITCH_ENV)
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[_CLUSTER_SWITCH_ENV] = "0"  # for the daemons this block starts
    ray_constants.ENABLE_RAY_CLUSTER = False  # for this process: get_node_ip_address() -> loopback
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(_CLUSTER_SWITCH_ENV, None)
        else:
            os.environ[_CLUSTER_SWITCH_ENV] = saved_env
