"""The search agent for chained questions (issue 24, item 3): links followed to every unit that
carries them (ids shared by several units, the values of the fields the question names), entities
ranked by how much of the question their units match, each entity's own unit first; and the LLM
query rewriter (`rewrite=`, `model_rewrite`) end to end through the scripted fake provider."""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import Path

import pytest

from ctxwin.memory import HashEmbedder, MemoryIndex
from ctxwin.memory.hops import (
    carries,
    entities,
    head_key,
    holds_value,
    link_keys,
    links,
    model_rewrite,
    named_values,
    quoted,
    rank_entities,
    unit_keys,
)
from ctxwin.memory.snippets import query_stems
from ctxwin.providers import client_for
from ctxwin.providers.base import NO_RETRY
from ctxwin.testing import FakeProvider
from ctxwin.testing.scripted import ModelRequest, Reply, server_error

PEOPLE = [("pers-0001", "Ann Lee"), ("pers-0002", "Bo Park"), ("pers-0003", "Cy Diaz"), ("pers-0004", "Di Fox"),
          ("pers-0005", "Ed Moss"), ("pers-0006", "Flo Kim")]
STATES = {"pers-0001": "Ohio", "pers-0002": "Ohio", "pers-0003": "Ohio", "pers-0004": "Utah", "pers-0005": "Utah",
          "pers-0006": "Utah"}
VEHICLES = {"pers-0001": 1, "pers-0003": 3, "pers-0004": 4, "pers-0005": 2}
QUESTION = ("Among the people who live in the same state as the owner of the pet named 'Rex', who owns the most "
            "vehicles?")


def records(root: Path) -> Path:
    """Record files linked by person id, as Letta's file-system questions have them."""
    memory = root / "memory"
    memory.mkdir(parents=True)
    (memory / "people.md").write_text("\n".join(
        f"### {name} (ID: {pid})\nDOB: 19{50 + n}-01-0{n + 1} | Email: {name.split()[0].lower()}@example.org\n"
        for n, (pid, name) in enumerate(PEOPLE)))
    (memory / "addresses.md").write_text("\n".join(
        f"### addr-000{n} (owner: {pid})\naddress_id: addr-000{n}\ncity: Town{n}\nstate: {state}\n"
        for n, (pid, state) in enumerate(STATES.items(), start=1)))
    (memory / "pets.md").write_text("### pet-0001 (owner: pers-0002)\npet_id: pet-0001\nname: Rex\nspecies: Dog\n\n"
                                    "### pet-0002 (owner: pers-0005)\npet_id: pet-0002\nname: Luna\nspecies: Cat\n")
    blocks, number = [], 0
    for pid, count in VEHICLES.items():
        for _ in range(count):
            number += 1
            blocks.append(f"### veh-000{number} (owner: {pid})\nvehicle_id: veh-000{number}\nmake: Ford\n"
                          f"license_plate: AB-{100 + number}\n")
    (memory / "vehicles.md").write_text("\n".join(blocks))
    return root


def test_the_links_a_hop_follows() -> None:
    assert quoted("the pet named 'Rex', plate \"7D U3378\", Caroline's dog") == ["Rex", "7D U3378"]
    assert holds_value("pet_id: pet-0001\nname: Rex", "rex") and not holds_value("### Rex Morris (ID: pers-1)", "Rex")
    assert link_keys("card-0142 (owner: pers-0060) expires 06/27, balance 2556.41, v1.2") == [
        "card-0142", "pers-0060", "v1.2"]
    assert unit_keys("Cards / card-0142 | 2026-01-02 2 January 2026 Friday | card0142 | pers0060 | parse http") == [
        "card0142", "pers0060"]
    stems = query_stems("people in the same state as the owner of pet 'Rex'")
    record = "address_id: addr-0001\nstate: Ohio\npet_id: pet-0001\ncity: Town1"
    assert named_values(stems, record) == [("state", "Ohio")]
    counts = {"pers0002": 3, "pet0001": 1, "Ohio": 3}
    asked: set[str] = set()
    keys, values = links("the same state", [("state: Ohio", "pet0001 | pers0002")], counts.__getitem__, asked)
    assert (keys, values) == (["pers0002"], [("state", "Ohio")])  # pet0001: one unit holds it, it links nothing
    assert links("the same state", [("state: Ohio", "pers0002")], counts.__getitem__, asked) == ([], [])  # asked
    assert carries("x", "pers0002", ["pers0002"], []) and carries("state: ohio", "", [], [("state", "Ohio")])
    assert not carries("state: Ohioan", "pers0003", ["pers0002"], [("state", "Ohio")])


def test_entities_are_ranked_by_the_rare_question_words_their_units_hold() -> None:
    fields = {1: "addr0001 | pers0001", 2: "addr0002 | pers0003", 3: "veh0001 | pers0003", 4: "veh0002 | pers0003",
              5: "veh0003 | pers0001", 6: "note"}
    texts = {1: "state: Ohio owner", 2: "state: Ohio owner", 3: "vehicle_id: veh-0001 owner", 4: "vehicle owner",
             5: "vehicle owner", 6: "nothing"}
    groups = entities(fields)
    assert groups == {"pers0001": [1, 5], "pers0003": [2, 3, 4]}  # the key most units share; keyless units out
    assert rank_entities("who owns the most vehicles in the same state", groups, texts) == ["pers0003", "pers0001"]
    assert head_key("### Cy Diaz (ID: pers-0003)\nDOB: 1952") == "pers0003"
    assert head_key("### veh-0001 (owner: pers-0003)") is None


def _index(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> MemoryIndex:
    if backend == "sqlite":
        return MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder())
    return MemoryIndex.postgres(request.getfixturevalue("postgres_dsn"), uuid.uuid4().hex, HashEmbedder())


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_four_hop_question_finds_the_entity_it_asks_for(tmp_path: Path, backend: str,
                                                           request: pytest.FixtureRequest) -> None:
    root = records(tmp_path / "ws")
    with _index(backend, tmp_path, request) as index:
        index.index_workspace(root)
        plain = index.search(QUESTION, k=3, context=False)
        chained = index.search(QUESTION, k=3, context=False, hops=4)
    # The pet's owner is Bo Park (Ohio); among Ohio's residents Cy Diaz has the most vehicles (3). Di Fox
    # has more (4) but lives in Utah.
    assert not any("Cy Diaz" in h.text for h in plain)
    assert chained[0].text.startswith("### Cy Diaz (ID: pers-0003)") and chained[0].hop == 4
    assert not any("Di Fox" in h.text for h in chained)


def test_a_hop_keeps_the_searchs_filters(tmp_path: Path) -> None:
    root = records(tmp_path / "ws")
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        index.index_workspace(root)
        hits = index.search(QUESTION, k=5, context=False, hops=4, paths=["memory/pets.md", "memory/addresses.md"])
    assert hits and {h.path for h in hits} <= {"memory/pets.md", "memory/addresses.md"}


def _owner_of_the_pet(request: ModelRequest) -> Reply:
    """A model that reads what the search found and names the next thing to look up: the owner's id."""
    found = re.search(r"owner: (pers-[0-9]+)", request.last_user_text)
    return Reply(found.group(1) if found else "nothing to look up")


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_the_query_rewriter_asks_a_model_for_each_hop(tmp_path: Path, api: str) -> None:
    root = records(tmp_path / "ws")
    question = "Where does the owner of the pet named 'Rex' live?"
    with FakeProvider(model=_owner_of_the_pet) as fake, \
            MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        index.index_workspace(root)
        base = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
        client = client_for(api, base, "test-model", api_key="sk-test", retry=NO_RETRY)  # type: ignore[arg-type]
        hits = index.search(question, k=3, mode="bm25", context=False, hops=2, rewrite=model_rewrite(client))
        sent = fake.requests
    assert len(sent) == 1 and sent[0].status == 200  # one hop after the first: one call
    body = str(sent[0].body)
    assert "Where does the owner of the pet named 'Rex' live?" in body and "name: Rex" in body
    assert "next search query" in body.lower()  # the rewriter's instructions went as the system prompt
    # The model answered pers-0002: the second hop searched for it and found the owner's address.
    assert any(h.hop == 2 and "state: Ohio" in h.text and "pers-0002" in h.text for h in hits)


def test_a_failing_rewriter_model_leaves_the_search_to_its_own_hops(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    root = records(tmp_path / "ws")
    question = "Where does the owner of the pet named 'Rex' live?"
    with FakeProvider(model=lambda request: server_error()) as fake, \
            MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        index.index_workspace(root)
        client = client_for("anthropic", fake.anthropic_base_url, "test-model", api_key="sk-test", retry=NO_RETRY)
        with caplog.at_level(logging.WARNING, logger="ctxwin.memory.index"):
            hits = index.search(question, k=3, mode="bm25", context=False, hops=2, rewrite=model_rewrite(client))
        assert [r.status for r in fake.requests] == [500]
    assert "query rewriter failed" in caplog.text
    assert any(h.hop == 2 and "pers-0002" in h.text for h in hits)  # its own follow-up: the owner's id
