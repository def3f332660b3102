"""Where a model reference points, checked before transformers is asked: a local directory, a
hub id, or neither; and whether the hub answers, probed once and briefly.

Transformers reports a directory that does not exist as a malformed repo id, a directory that
holds no model as a missing tokenizer library, and an unreachable hub after a minute or more of
retries, each in a traceback; here each is one line in seconds. When the hub does not answer,
hub files come from the local cache only (as under HF_HUB_OFFLINE), so a cached model loads.
"""

from __future__ import annotations

import os
import threading
import urllib.request
from functools import cache

from huggingface_hub import constants, try_to_load_from_cache
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from specbench.errors import ConfigError

PROBE_TIMEOUT_S = 3.0
ALLOWED = "allowed: a save_pretrained directory, a hub id (namespace/name) or specbench:<name>"


def _probe() -> str | None:
    request = urllib.request.Request(constants.ENDPOINT, method="HEAD")
    try:
        urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return None  # it answered
    except OSError as err:  # URLError and timeouts are OSErrors
        return str(getattr(err, "reason", err))
    return None


@cache
def unreachable() -> str | None:
    """Why the hub does not answer one HEAD request, or None. The request runs in a thread so
    that a name lookup that hangs (no timeout applies to it) is not waited for either."""
    answer: list[str | None] = []
    probe = threading.Thread(target=lambda: answer.append(_probe()), daemon=True)
    probe.start()
    probe.join(PROBE_TIMEOUT_S + 1)
    return answer[0] if answer else f"no answer within {PROBE_TIMEOUT_S + 1:g} s"


ASKED_OFFLINE = constants.HF_HUB_OFFLINE  # the user's HF_HUB_OFFLINE, before any probe


def settle() -> str | None:
    """Why the hub does not answer, None if it does or the user chose the local cache. When it
    does not, hub files come from the local cache from now on: no request and no retry, in
    huggingface_hub and in datasets imported after this."""
    if ASKED_OFFLINE:
        return None
    why = unreachable()
    if why is not None:
        constants.HF_HUB_OFFLINE = True  # huggingface_hub reads it at every request
    return why


def check_hub(ref: str, key: str, revision: str | None, marker: str) -> None:
    """A hub id must be reachable or cached (`marker`, a file every such repository has); with
    HF_HUB_OFFLINE a miss is left to the loader, whose error is one line too."""
    why = settle()
    if why is not None and not isinstance(try_to_load_from_cache(ref, marker, revision), str):
        raise ConfigError(
            key,
            ref,
            f"no such directory; as a hub id: the hub ({constants.ENDPOINT}) does not answer "
            f"({why}) and the local cache has no copy; allowed: a local directory, a hub id "
            "cached earlier, or network access",
        )


def check_reference(ref: str, key: str, revision: str | None, model: bool = True) -> None:
    """One line, in seconds, for a reference transformers would fail on slowly or in a
    traceback. `model`: it must hold a model (config.json), not only a tokenizer."""
    if os.path.isdir(ref):  # how transformers tells a directory from a hub id
        if model and not os.path.isfile(os.path.join(ref, "config.json")):
            raise ConfigError(
                key, ref, f"is a directory but holds no model (no config.json); {ALLOWED}"
            )
        return
    try:
        validate_repo_id(ref)
    except HFValidationError:
        raise ConfigError(key, ref, f"no such directory, and not a hub id; {ALLOWED}") from None
    check_hub(ref, key, revision, "config.json" if model else "tokenizer_config.json")
