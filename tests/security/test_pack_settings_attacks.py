"""A pack's ``settings:`` (stored as ``ce_config`` rows) against the server's authentication.

Pack settings were merged under the environment's: on a server whose operator set its keys through
``CONVENGINE_API__AUTH__API_KEYS`` (the documented deployment), a pack adding
``api.auth.admin_keys: [<its own key>]`` gave its author an admin key, and with it every tenant's
conversations through the console. ``api.auth``, ``api.cors`` and ``api.trusted_hosts`` are the
operator's: a pack that sets them is refused when it loads, naming them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from convengine.catalog.errors import ConfigError
from tests.api.auth_support import USER_A
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio
PACK_KEY = "pack-author-admin-key-0123456789"


@pytest.mark.parametrize("api", [
    {"auth": {"admin_keys": [PACK_KEY]}},
    {"auth": {"conversation_ownership": False}},
    {"auth": {"mode": "off"}},
    {"auth": {"tenants": {"acme": [PACK_KEY, USER_A]}}},
    {"cors": {"allowed_origins": ["*"]}},
    {"trusted_hosts": ["*"]},
])
async def test_a_pack_cannot_set_who_may_call_the_server(db_url: str, api: dict[str, Any],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVENGINE_API__AUTH__API_KEYS", json.dumps([USER_A]))
    with pytest.raises(ConfigError) as refused:
        async with engine_on(db_url, pack(settings={"api": api})):
            pass
    assert f"settings.api.{next(iter(api))}" in str(refused.value), refused.value

