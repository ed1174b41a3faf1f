"""Field names for questions whose ids are arbitrary strings.

Question-set formats (`/v1/systemone`, LangChain's decision models) key their questions by any string,
while a rubric's field name is a JSON key the model reads in its answer line and a pydantic field the
answers are validated into. One mapping serves every such format, so the same question id is asked
under the same key, and so read the same way, whichever door it came in by.
"""

from __future__ import annotations

import re
import unicodedata

FIELD_NAME_LIMIT = 48
"""Characters of a question id kept in its field name: a key long enough to read, short enough that a
long id does not crowd the question out of the model's row."""


def field_names(ids: list[str]) -> dict[str, str]:
    """A readable, valid and unique JSON key for every question id (`is spam?` -> `is_spam`, `1` -> `q_1`).

    Ids that come out the same get suffixes in the order given (`is_spam`, `is_spam_2`), so callers
    that want one id's name not to depend on the order of the others pass the ids sorted."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for qid in ids:
        ascii_id = unicodedata.normalize("NFKD", qid).encode("ascii", "ignore").decode()
        base = re.sub(r"[^A-Za-z0-9]+", "_", ascii_id).strip("_")[:FIELD_NAME_LIMIT].rstrip("_")
        if not base or not base[0].isalpha():
            base = f"q_{base}" if base else "q"
        name, suffix = base, 2
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(name)
        names[qid] = name
    return names
