"""The Python docs of databases: help(gpufeed.Loader) and gpufeed.open's docstring name the
URIs, every parameter the URI parser takes (read from src/sources/db/uri.cc), where the
credentials come from and what stays in memory; and a SQLite URI opens as they say."""
import os
import pydoc
import re
import sqlite3

import pytest

import gpufeed

URI_PARSER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src",
                          "sources", "db", "uri.cc")


def test_help_of_the_loader_names_both_database_uris():
    text = pydoc.render_doc(gpufeed.Loader, renderer=pydoc.plaintext)
    assert "sqlite:///" in text and "postgresql://" in text
    assert "~/.pgpass" in text and "PGPASSWORD" in text
    assert "help(gpufeed.open)" in text


def test_open_documents_every_parameter_the_uri_parser_takes():
    if not os.path.isfile(URI_PARSER):
        pytest.skip("the C++ sources are not beside these tests")
    with open(URI_PARSER) as f:
        names = set(re.findall(r'name == "(\w+)"', f.read()))
    assert {"table", "query", "columns", "key", "connections", "cursor", "fields"} <= names
    doc = gpufeed.open.__doc__
    for name in sorted(names):
        assert f"{name}=" in doc, f"gpufeed.open's docstring lacks the URI parameter {name}="
    for words in ("sqlite:///", "postgresql://", "postgres:", "PGPASSWORD", "~/.pgpass",
                  "libpq", "at open", "memory"):
        assert words in doc


def test_open_path_names_databases():
    assert "sqlite:///" in gpufeed._gpufeed.open_path.__doc__


@pytest.fixture
def database(tmp_path):
    path = tmp_path / "train.db"
    with sqlite3.connect(path) as db:
        db.execute("create table samples (id integer, x real, label integer)")
        db.executemany("insert into samples values (?, ?, ?)",
                       [(i, 0.5 * i, i % 3) for i in range(40)])
    return str(path)


def test_a_sqlite_uri_loads_as_documented(database):
    loader = gpufeed.Loader(f"sqlite:///{database}?table=samples", fields=["x", "label"],
                            batch_size=8, device="cpu")
    assert [name for name, _, _ in loader.schema] == ["x", "label"]
    assert len(loader) == 5
    # Loaded at open: the table may go away and epochs still read every row.
    os.remove(database)
    rows = sum(len(batch["x"]) for batch in loader)
    assert rows == 40


def test_chunk_cache_with_a_database_says_it_is_for_hdf5(database):
    with pytest.raises(gpufeed.InvalidArgument, match="chunk_cache applies to HDF5"):
        gpufeed.open(f"sqlite:///{database}?table=samples", chunk_cache=1 << 20)
