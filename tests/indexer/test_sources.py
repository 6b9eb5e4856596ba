"""Corpus sources: FlyAOC exports (JSONL, JSON, Parquet, HF dataset folder), PMC JATS, BioC XML/JSON; one item per
record, rejects naming source/record/field, id normalisation, JATS text flattening and section typing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexer.sources import IdMap, count_records, detect_format, iter_records, normalize_pmcid, normalize_year
from search.core.errors import InputError

try:  # the hf extra (also in the test extra); without it the Parquet/Arrow tests skip
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError:  # pragma: no cover - exercised in a core-only install
    pa = pq = None

needs_pyarrow = pytest.mark.skipif(pa is None, reason="pyarrow is not installed (pip install 'flysift[hf]')")

GOOD = {"pmcid": "pmc101", "pmid": 9001, "doi": "10.1/x", "year": "2004", "journal": "Dev Biol",
        "title": "Dpp  in the\nwing", "abstract": "Part one.\n\nPart two.",
        "sections": {"intro": ["Intro para one.", "Intro para two."], "RESULTS": "Res one.\n\nRes two.",
                     "Custom Heading": ["Other para."], "METHODS": []}}


def _items(*paths, **kw):
    return list(iter_records([Path(p) for p in paths], **kw))


def _write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------------------
# normalisation and detection

@pytest.mark.parametrize("raw", ["PMC1234", "pmc1234", "1234", 1234, " PMC01234 "])
def test_pmcid_forms(raw):
    assert normalize_pmcid(raw) == "PMC1234"


@pytest.mark.parametrize("raw", ["PMID1234", "", "PMC", 12.5, None, True])
def test_bad_pmcid(raw):
    with pytest.raises(InputError) as exc:
        normalize_pmcid(raw)
    assert exc.value.field == "pmcid"


def test_year_forms():
    assert [normalize_year(v) for v in (2004, "2004", "2004-05-01", 2004.0)] == [2004] * 4
    for bad in ("soon", "04", True, 20040):
        with pytest.raises(InputError):
            normalize_year(bad)


def test_detect_format(tmp_path):
    (tmp_path / "a.jsonl").write_text("{}\n")
    (tmp_path / "arr.json").write_text('[{"pmcid": "PMC1", "title": "documents"}]')
    (tmp_path / "b.json").write_text('[{"source": "PMC", "documents": [{"id": "1", "passages": []}]}]')
    (tmp_path / "c.xml").write_text('<?xml version="1.0"?>\n<!DOCTYPE collection SYSTEM "BioC.dtd">\n<collection/>')
    (tmp_path / "d.nxml").write_text('<!DOCTYPE article PUBLIC "x" "y"><article/>')
    (tmp_path / "e.txt").write_text("x")
    assert [detect_format(tmp_path / n) for n in ("a.jsonl", "arr.json", "b.json", "c.xml", "d.nxml")] == [
        "flyaoc", "flyaoc", "bioc", "bioc", "jats"]
    with pytest.raises(InputError, match="e.txt"):
        detect_format(tmp_path / "e.txt")
    with pytest.raises(InputError, match="e.txt"):
        iter_records([tmp_path / "e.txt"])
    with pytest.raises(InputError, match="missing"):
        iter_records([tmp_path / "missing.jsonl"])
    with pytest.raises(InputError, match="unknown format"):
        iter_records([tmp_path / "a.jsonl"], fmt="pdf")


# ---------------------------------------------------------------------------------------------------------------
# FlyAOC exports

def test_flyaoc_jsonl_good_record(tmp_path):
    src = _write_jsonl(tmp_path / "c.jsonl", [GOOD])
    [item] = _items(src)
    p = item.paper
    assert item.reject is None and item.source == str(src) and item.record == 1
    assert (p.pmcid, p.pmid, p.year, p.doi, p.journal) == ("PMC101", "9001", 2004, "10.1/x", "Dev Biol")
    assert p.title == "Dpp in the wing" and p.abstract == "Part one.\n\nPart two."
    assert [(s.type, s.title, s.paragraphs) for s in p.sections] == [
        ("INTRO", None, ["Intro para one.", "Intro para two."]), ("RESULTS", None, ["Res one.", "Res two."]),
        ("OTHER", "Custom Heading", ["Other para."])]


def test_flyaoc_title_abstract_keys_and_body_fallback(tmp_path):
    src = _write_jsonl(tmp_path / "c.jsonl", [
        {"pmcid": "1", "sections": {"TITLE": "A title", "ABSTRACT": ["Abs."], "INTRO": ["x."]}},
        {"pmcid": "2", "title": "T", "body": "Para A.\n\nPara B."},
        {"pmcid": "3", "title": "T", "abstract": "Kept.", "sections": {"ABSTRACT": "Other text."}},
    ])
    a, b, c = _items(src)
    assert (a.paper.title, a.paper.abstract, len(a.paper.sections)) == ("A title", "Abs.", 1)
    assert b.paper.sections[0].paragraphs == ["Para A.", "Para B."] and b.warnings
    assert c.paper.abstract == "Kept." and "differs" in c.warnings[0]


@pytest.mark.parametrize("record, field, reason", [
    ({"title": "no id"}, "pmcid", "no pmcid"),
    ({"pmcid": "abc", "title": "t"}, "pmcid", "not a PMCID"),
    ({"pmcid": "PMC5"}, "text", "no text"),
    ({"pmcid": "PMC5", "sections": {"INTRO": []}, "abstract": ""}, "text", "no text"),
    ({"pmcid": "PMC5", "title": "t", "sections": 42}, "sections", "unknown shape"),
    ({"pmcid": "PMC5", "title": "t", "sections": {"INTRO": {"a": {"b": 1}}}}, "sections.INTRO", "an object"),
    ({"pmcid": "PMC5", "title": "t", "sections": {"INTRO": ["ok", 3]}}, "sections.INTRO[1]", "a number"),
    ({"pmcid": "PMC5", "title": ["t"]}, "title", "a list"),
    ({"pmcid": "PMC5", "title": "t", "year": "soon"}, "year", "not a year"),
    ({"pmcid": "PMC5", "title": "t", "pmid": "x1"}, "pmid", "not a PMID"),
    ({"pmcid": "PMC5", "title": "t", "sections": [{"type": 3}]}, "sections[0].type", "expected a section type"),
    ([1, 2], None, "expected an object"),
])
def test_flyaoc_rejects_name_source_record_field(tmp_path, record, field, reason):
    src = _write_jsonl(tmp_path / "bad.jsonl", [GOOD, record])
    good, bad = _items(src)
    assert good.paper is not None
    assert bad.paper is None and bad.record == 2
    r = bad.reject
    assert (r.source, r.record, r.field) == (str(src), 2, field)
    assert reason in r.reason
    if isinstance(record, dict) and record.get("pmcid") == "PMC5":
        assert r.pmcid == "PMC5"


def test_flyaoc_malformed_line_blank_lines_and_strict(tmp_path):
    src = tmp_path / "c.jsonl"
    src.write_text(json.dumps(GOOD) + "\n\n" + '{"pmcid": "PMC7", "title": oops}\n' + json.dumps(GOOD) + "\n")
    items = _items(src)
    assert [i.record for i in items] == [1, 3, 4]
    bad = items[1].reject
    assert bad.record == 3 and bad.pmcid == "PMC7" and "malformed JSON" in bad.reason
    assert count_records([src]) == 3
    with pytest.raises(InputError) as exc:
        _items(src, strict=True)
    assert (exc.value.source, exc.value.record) == (str(src), 3) and "record 3" in exc.value.message


def test_flyaoc_gzipped_jsonl_with_bom(tmp_path):
    import gzip

    path = tmp_path / "corpus.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\ufeff" + json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n")
    assert detect_format(path) == "flyaoc" and count_records([tmp_path]) == 2
    assert [i.paper.pmcid for i in _items(tmp_path)] == ["PMC101", "PMC101"]


def test_flyaoc_json_array_and_data_object(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps([GOOD, {"pmcid": 7}]))
    (tmp_path / "b.json").write_text(json.dumps({"data": [GOOD]}))
    (tmp_path / "c.json").write_text('[{"pmcid": "PMC1",')
    items = _items(tmp_path)  # folder walk, sorted
    assert [(Path(i.source).name, i.record, i.reject.field if i.reject else None) for i in items] == [
        ("a.json", 1, None), ("a.json", 2, "text"), ("b.json", 1, None), ("c.json", 0, None)]
    assert "cannot read JSON" in items[-1].reject.reason
    assert count_records([tmp_path / "a.json", tmp_path / "b.json"]) == 3


def _table(n: int):
    """FlyAOC-like rows with ``sections`` as an Arrow struct (null where a paper lacks a type)."""
    sections = pa.struct([("INTRO", pa.list_(pa.string())), ("RESULTS", pa.string())])
    rows = [{"pmcid": f"PMC{i}", "title": f"Paper {i}", "abstract": "", "year": 2000 + i % 20,
             "sections": {"INTRO": [f"Intro {i}."], "RESULTS": None if i % 2 else f"Res {i}."}}
            for i in range(1, n + 1)]
    rows[4]["pmcid"] = None
    schema = pa.schema([("pmcid", pa.string()), ("title", pa.string()), ("abstract", pa.string()),
                        ("year", pa.int64()), ("sections", sections)])
    return pa.Table.from_pylist(rows, schema=schema)


@needs_pyarrow
def test_parquet_streams_batches_and_counts(tmp_path):
    path = tmp_path / "corpus.parquet"
    pq.write_table(_table(600), path, row_group_size=250)
    items = _items(path)
    assert [i.record for i in items] == list(range(1, 601)) and count_records([path]) == 600
    assert items[4].reject.field == "pmcid" and items[4].reject.record == 5
    p = items[1].paper
    assert [(s.type, s.paragraphs) for s in p.sections] == [("INTRO", ["Intro 2."]), ("RESULTS", ["Res 2."])]
    assert [s.type for s in items[0].paper.sections] == ["INTRO"]


@needs_pyarrow
def test_arrow_map_sections(tmp_path):
    """``sections`` stored as an Arrow map arrives as a list of (type, paragraphs) pairs."""
    kind = pa.map_(pa.string(), pa.list_(pa.string()))
    path = tmp_path / "m.parquet"
    pq.write_table(pa.table({"pmcid": ["PMC1"], "sections": pa.array([[("INTRO", ["a."]), ("Weird", ["b."])]],
                                                                     type=kind)}), path)
    [item] = _items(path)
    assert [(s.type, s.title) for s in item.paper.sections] == [("INTRO", None), ("OTHER", "Weird")]


@needs_pyarrow
def test_hf_dataset_folder(tmp_path):
    """What ``datasets.save_to_disk`` writes: Arrow IPC stream files listed in state.json, beside dataset_info.json."""
    root = tmp_path / "hf"
    split = root / "train"
    split.mkdir(parents=True)
    table = _table(12).drop_columns(["sections"]).append_column(
        "sections", pa.array([json.dumps({"DISCUSS": [f"Disc {i}."]}) for i in range(12)]))
    for k, part in enumerate((table.slice(0, 7), table.slice(7))):
        with pa.ipc.new_stream(split / f"data-0000{k}-of-00002.arrow", part.schema) as writer:
            writer.write_table(part, max_chunksize=3)
    (split / "dataset_info.json").write_text(json.dumps({"features": {}}))
    (split / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00002.arrow"},
                                                                  {"filename": "data-00001-of-00002.arrow"}]}))
    (root / "dataset_dict.json").write_text(json.dumps({"splits": ["train"]}))
    (root / "README.md").write_text("not data")
    assert detect_format(split) == "flyaoc" and detect_format(root) == "flyaoc"
    items = _items(root)
    assert len(items) == 12 and count_records([root]) == 12
    assert [(Path(i.source).name, i.record) for i in items][6:8] == [("data-00000-of-00002.arrow", 7),
                                                                    ("data-00001-of-00002.arrow", 1)]
    assert items[0].paper.sections[0].type == "DISCUSS" and items[4].reject.field == "pmcid"


@pytest.mark.parametrize("name,content", [("empty.jsonl", ""), ("blank.jsonl", "\n \n"), ("empty.json", "[]"),
                                          ("empty.nxml", ""), ("empty.xml", "")])
def test_an_input_without_records_is_one_reject_not_silence(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    items = _items(path)
    assert len(items) == 1 and items[0].paper is None
    r = items[0].reject
    assert r.source == str(path) and r.record in (0, 1) and r.reason
    assert count_records([path]) == 1
    with pytest.raises(InputError):
        _items(path, strict=True)


def test_unknown_files_in_a_folder_are_rejects_documentation_is_skipped(tmp_path):
    _write_jsonl(tmp_path / "a.jsonl", [GOOD])
    (tmp_path / "table.csv").write_text("pmcid,title\nPMC1,x\n")
    (tmp_path / "scan.pdf").write_bytes(b"%PDF-1.4")
    (tmp_path / "README.md").write_text("card")
    (tmp_path / "LICENSE").write_text("CC-BY")
    (tmp_path / ".hidden.csv").write_text("x")
    assert detect_format(tmp_path) == "flyaoc"
    items = _items(tmp_path)
    assert [(Path(i.source).name, i.record, i.paper is not None) for i in items] == [
        ("a.jsonl", 1, True), ("scan.pdf", 0, False), ("table.csv", 0, False)]
    assert "unknown input format '.csv'" in items[2].reject.reason
    assert count_records([tmp_path]) == 3


# ---------------------------------------------------------------------------------------------------------------
# JATS

JATS = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE article PUBLIC "-//NLM//DTD Journal Archiving and Interchange DTD v2.3 20070202//EN" "archivearticle.dtd">
<article xmlns:xlink="http://www.w3.org/1999/xlink" xmlns:mml="http://www.w3.org/1998/Math/MathML">
<front><journal-meta><journal-id journal-id-type="nlm-ta">Dev Biol</journal-id>
<journal-title>Developmental <italic>Biology</italic></journal-title></journal-meta>
<article-meta>{ids}
<title-group><article-title>The <italic>dpp</italic> gene in <italic>Drosophila</italic></article-title></title-group>
<pub-date pub-type="collection"><year>2001</year></pub-date><pub-date pub-type="ppub"><year>2003</year></pub-date>
<pub-date pub-type="epub"><day>1</day><year>2002</year></pub-date>
<abstract><sec><title>Background</title><p>Signals pattern the wing.</p></sec>
<sec><title>Results</title><p>We found <italic>dpp</italic> targets.</p></sec></abstract>
<abstract abstract-type="toc"><p>Short teaser.</p></abstract>
</article-meta></front>
<body>
<sec sec-type="intro"><title>Background</title><p>The <italic>dpp</italic>mutant is glued in the source, the
<italic>dpp</italic> mutant is not [<xref ref-type="bibr" rid="B1"/>]. Cells grow (<xref ref-type="bibr" rid="B2"/>,
<xref ref-type="bibr" rid="B3"/>) fast [<xref ref-type="bibr" rid="B4">4</xref>].</p>
<p>Kept at 5% CO
\t\t\t<sub>2</sub> as before<fig id="F1"><label>Figure 1</label><caption><title>Wing discs.</title><p>Dpp in
<bold>A</bold>.</p><p>Brk in B.</p></caption><graphic xlink:href="f1"/></fig>.</p></sec>
<sec><title>2. Materials and Methods</title>
<p>Flies were raised<inline-formula><mml:math><mml:mi>α</mml:mi></mml:math></inline-formula>.</p>
<sec><title>Antibodies</title><p>Anti-Dpp<sup>a</sup>was used.</p>
<list><list-item><p>Item one</p></list-item><list-item><p>Item two</p></list-item></list></sec></sec>
<sec><title>Results and discussion</title><sec><title>Dpp moves</title>
<p>It moves<disp-formula><tex-math>\\alpha</tex-math>
<mml:math><mml:mi>x</mml:mi></mml:math></disp-formula>far.</p>
<table-wrap id="T1"><label>Table 1</label><caption><p>Counts of discs</p></caption><table><tr><td>9</td></tr></table>
</table-wrap></sec></sec>
<sec><title>A new model</title><p>Speculation.</p></sec>
<sec><title>Conclusions</title><p>Done.</p></sec>
</body>
<back><ack><title>Acknowledgements</title><p>We thank all.</p></ack>
<ref-list><ref id="B1"><citation>Reference text that is not body.</citation></ref></ref-list></back>
</article>"""

IDS = ('<article-id pub-id-type="pmid">11532192</article-id><article-id pub-id-type="pmc">48141</article-id>'
       '<article-id pub-id-type="doi">10.1186/x</article-id>')


def _jats(tmp_path: Path, name: str = "a.nxml", ids: str = IDS, text: str | None = None) -> Path:
    path = tmp_path / name
    path.write_text(text if text is not None else JATS.replace("{ids}", ids), encoding="utf-8")
    return path


def test_jats_metadata_and_sections(tmp_path):
    [item] = _items(_jats(tmp_path))
    p = item.paper
    assert (item.record, item.warnings) == (1, [])
    assert (p.pmcid, p.pmid, p.doi, p.year, p.journal) == ("PMC48141", "11532192", "10.1186/x", 2002,
                                                            "Developmental Biology")
    assert p.title == "The dpp gene in Drosophila"
    assert p.abstract == "Signals pattern the wing.\n\nWe found dpp targets."
    assert [(s.type, s.title) for s in p.sections] == [
        ("INTRO", "Background"), ("METHODS", "2. Materials and Methods"), ("METHODS", "Antibodies"),
        ("RESULTS", "Dpp moves"), ("OTHER", "A new model"), ("CONCL", "Conclusions"),
        ("ACK_FUND", "Acknowledgements"), ("FIG", "Figure 1"), ("TABLE", "Table 1")]


def test_jats_text_flattening(tmp_path):
    p = _items(_jats(tmp_path))[0].paper
    texts = {s.title: s.paragraphs for s in p.sections}
    assert texts["Background"] == [
        "The dppmutant is glued in the source, the dpp mutant is not. Cells grow fast [4].",
        "Kept at 5% CO2 as before."]
    assert texts["2. Materials and Methods"] == ["Flies were raisedα."]
    assert texts["Antibodies"] == ["Anti-Dppawas used.", "Item one", "Item two"]
    assert texts["Dpp moves"] == ["It moves x far."]
    assert texts["Figure 1"] == ["Wing discs. Dpp in A. Brk in B."]
    assert texts["Table 1"] == ["Counts of discs"]
    everything = [p.title, p.abstract] + [x for s in p.sections for x in s.paragraphs]
    assert all("  " not in t and t == t.strip() for t in everything)
    assert not any("Reference text" in t or "teaser" in t or "[]" in t or "()" in t for t in everything)


def test_jats_without_pmcid_uses_id_map_or_pmid(tmp_path):
    path = _jats(tmp_path, "BMC Genet-2-_-48141.nxml", ids='<article-id pub-id-type="pmid">11532192</article-id>')
    [item] = _items(path)
    assert item.paper.pmcid == "PMID:11532192" and item.warnings == ["no PMCID: keyed as PMID:11532192"]
    ids = tmp_path / "craft-idmappings.txt"
    ids.write_text("#Format: [FILE NAME] <tab> [PMCID] <tab> [PMID]\nBMC Genet-2-_-48141.nxml\tPMC48141\t11532192\n")
    id_map = IdMap.load(ids)
    assert len(id_map) == 1 and id_map.lookup(path) == ("PMC48141", "11532192")
    [mapped] = _items(path, id_map=id_map)
    assert (mapped.paper.pmcid, mapped.paper.pmid, mapped.warnings) == ("PMC48141", "11532192", [])


def test_jats_doi_key_and_missing_ids(tmp_path):
    [doi] = _items(_jats(tmp_path, "d.nxml", ids='<article-id pub-id-type="doi">10.1371/x</article-id>'))
    assert doi.paper.pmcid == "DOI:10.1371/x" and doi.warnings
    [none] = _items(_jats(tmp_path, "n.nxml", ids=""))
    assert none.reject.field == "pmcid" and none.reject.record == 1


def test_id_map_bad_line(tmp_path):
    path = tmp_path / "ids.tsv"
    path.write_text("a.nxml\tPMC1\t1\nb.nxml\tPMCX\t2\n")
    with pytest.raises(InputError) as exc:
        IdMap.load(path)
    assert exc.value.record == 2 and exc.value.field == "pmcid" and str(path) in exc.value.message


@pytest.mark.parametrize("text, field, reason", [
    ("<article><front><article-meta><p>unclosed</article-meta></front></article>", None, "malformed XML"),
    ("<article><front><article-meta>" + IDS + "</article-meta></front><body/></article>", "text", "no text"),
    ("<article><front/><body><p>x</p></body></article>", "article-meta", "article-meta"),
    ("<book><front/></book>", None, "expected <article>"),
])
def test_jats_rejects(tmp_path, text, field, reason):
    path = _jats(tmp_path, "bad.nxml", text=text)
    [item] = _items(path, fmt="jats")
    assert item.paper is None and (item.reject.source, item.reject.record, item.reject.field) == (str(path), 1, field)
    assert reason in item.reject.reason
    if reason == "malformed XML":
        assert "line 1" in item.reject.reason


# ---------------------------------------------------------------------------------------------------------------
# BioC

def _passage(section_type: str, kind: str, text: str, offset: int = 0, **infons) -> dict:
    return {"bioctype": "BioCPassage", "offset": offset, "infons": {"section_type": section_type, "type": kind,
                                                                    **infons},
            "text": text, "sentences": [], "annotations": [], "relations": []}


def _bioc_document(pmc: str = "1790863") -> dict:
    front = _passage("TITLE", "front", "Notch in the fly eye", 0, **{
        "article-id_doi": "10.1371/journal.pgen.0030022", "article-id_pmc": pmc, "article-id_pmid": "17305429",
        "journal": "PLoS Genet", "year": "2007", "name_0": "surname:Smith;given-names:J"})
    passages = [front,
                _passage("ABSTRACT", "abstract_title_1", "Abstract"),
                _passage("ABSTRACT", "abstract", "Notch acts."),
                _passage("ABSTRACT", "abstract", "Delta too."),
                _passage("INTRO", "title_1", "Introduction"),
                _passage("INTRO", "paragraph", "Intro one."),
                _passage("INTRO", "paragraph", "Intro two."),
                _passage("RESULTS", "title_1", "Results"),
                _passage("RESULTS", "title_2", "Notch is needed"),
                _passage("RESULTS", "paragraph", "Res one."),
                _passage("RESULTS", "title_2", "Delta is needed"),
                _passage("RESULTS", "paragraph", "Res two."),
                _passage("FIG", "fig_title_caption", "Eye discs.", id="pgen-g001"),
                _passage("FIG", "fig_caption", "Notch in A.", id="pgen-g001"),
                _passage("TABLE", "table_caption", "Counts.", id="pgen-t001"),
                _passage("TABLE", "table", "<table>9</table>", id="pgen-t001"),
                _passage("DISCUSS", "paragraph", "Disc one."),
                _passage("REF", "title", "References"),
                _passage("REF", "ref", "Smith J. Old paper.", year="1999", source="Cell")]
    return {"bioctype": "BioCDocument", "id": pmc, "infons": {"license": "CC BY"}, "passages": passages,
            "relations": [], "annotations": []}


def _check_bioc_paper(p):
    assert (p.pmcid, p.pmid, p.doi, p.year, p.journal) == ("PMC1790863", "17305429", "10.1371/journal.pgen.0030022",
                                                            2007, "PLoS Genet")
    assert p.title == "Notch in the fly eye" and p.abstract == "Notch acts.\n\nDelta too."
    assert [(s.type, s.title, s.paragraphs) for s in p.sections] == [
        ("INTRO", "Introduction", ["Intro one.", "Intro two."]), ("RESULTS", "Notch is needed", ["Res one."]),
        ("RESULTS", "Delta is needed", ["Res two."]), ("FIG", None, ["Eye discs. Notch in A."]),
        ("TABLE", None, ["Counts."]), ("DISCUSS", None, ["Disc one."])]


def test_bioc_json_list_of_collections(tmp_path):
    path = tmp_path / "PMC1790863.json"
    bad = _bioc_document()
    bad["passages"] = "nope"
    path.write_text(json.dumps([{"bioctype": "BioCCollection", "source": "PMC", "date": "20240101",
                                 "key": "pmc.key", "infons": {}, "documents": [_bioc_document(), bad]}]))
    assert detect_format(path) == "bioc" and count_records([path]) == 2
    good, rejected = _items(path)
    _check_bioc_paper(good.paper)
    assert (rejected.record, rejected.reject.field) == (2, "passages")


def _bioc_xml(doc: dict) -> str:
    def infons(d):
        return "".join(f'<infon key="{k}">{v}</infon>' for k, v in d.items())
    passages = "".join(f"<passage>{infons(p['infons'])}<offset>{p['offset']}</offset>"
                       f"<text>{p['text'].replace('<', '&lt;')}</text></passage>" for p in doc["passages"])
    return f"<document><id>{doc['id']}</id>{infons(doc['infons'])}{passages}</document>"


def test_bioc_xml_collection_and_truncation(tmp_path):
    path = tmp_path / "coll.xml"
    path.write_text('<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE collection SYSTEM "BioC.dtd"><collection>'
                    f"<source>PMC</source><date>20240101</date><key>pmc.key</key>{_bioc_xml(_bioc_document())}"
                    "<document><id>2</id><passage><text>broken</passage></document></collection>")
    assert detect_format(path) == "bioc" and count_records([path]) == 2
    good, bad = _items(path)
    _check_bioc_paper(good.paper)
    assert bad.record == 2 and "malformed XML" in bad.reject.reason and "line" in bad.reject.reason


def test_bioc_ids_fallbacks(tmp_path):
    doc = _bioc_document()
    del doc["passages"][0]["infons"]["article-id_pmc"]
    no_pmc = json.loads(json.dumps(doc))
    no_pmc["id"] = "17305429"  # PubTator-style: the document id is the PMID
    nothing = json.loads(json.dumps(no_pmc))
    del nothing["passages"][0]["infons"]["article-id_pmid"]
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"source": "PMC", "documents": [doc, no_pmc, nothing]}))
    a, b, c = _items(path)
    assert a.paper.pmcid == "PMC1790863"
    assert b.paper.pmcid == "PMID:17305429" and b.warnings == ["no PMCID: keyed as PMID:17305429"]
    assert c.paper.pmcid == "PMC17305429"  # a bare document id is read as the PMCID
    c_doc = json.loads(json.dumps(nothing))
    c_doc["id"] = ""
    path.write_text(json.dumps({"documents": [c_doc]}))
    [d] = _items(path)
    assert d.reject.field == "pmcid" and d.reject.record == 1


# ---------------------------------------------------------------------------------------------------------------
# authors (every source that carries them)

AUTHORS_JATS = """<?xml version="1.0"?>
<article><front><article-meta><article-id pub-id-type="pmc">777</article-id>
<contrib-group>
<contrib contrib-type="author"><name><surname>S&#228;llstr&#246;m</surname><given-names>Mary-Ann</given-names></name>
<xref ref-type="aff" rid="I1">1</xref></contrib>
<contrib contrib-type="author"><name-alternatives><name><surname>Li</surname><given-names>Wei</given-names>
<suffix>Jr</suffix></name></name-alternatives></contrib>
<contrib contrib-type="author"><collab>FlyBase Consortium<contrib-group><contrib><name><surname>Member</surname>
</name></contrib></contrib-group></collab></contrib>
<contrib contrib-type="author"><string-name>J. Q. Public</string-name></contrib>
<contrib><name><given-names>Madonna</given-names></name></contrib>
</contrib-group>
<contrib-group><contrib contrib-type="editor"><name><surname>Editor</surname><given-names>E</given-names></name>
</contrib></contrib-group>
<title-group><article-title>Authors</article-title></title-group></article-meta></front>
<body><p>Text.</p></body></article>"""


def test_jats_authors_from_the_contrib_group(tmp_path):
    [item] = _items(_jats(tmp_path, text=AUTHORS_JATS))
    assert item.paper.authors == ["Sällström, Mary-Ann", "Li, Wei, Jr", "FlyBase Consortium", "J. Q. Public",
                                  "Madonna"]


def test_jats_authors_are_bounded(tmp_path):
    many = "".join(f'<contrib contrib-type="author"><name><surname>{"X" * 400}{i}</surname></name></contrib>'
                   for i in range(520))
    text = AUTHORS_JATS.replace("<contrib-group>", "<contrib-group>" + many, 1)
    [item] = _items(_jats(tmp_path, text=text))
    assert len(item.paper.authors) == 500 and all(len(a) == 300 for a in item.paper.authors)
    assert any("525 authors: the first 500 are kept" in w for w in item.warnings)


def test_bioc_authors_from_name_infons(tmp_path):
    doc = _bioc_document()
    doc["passages"][0]["infons"].update({"name_1": "surname:Doe;given-names:Jane Q.", "name_10": "Drosophila "
                                         "Consortium", "name_2": "given-names:Cher"})
    path = tmp_path / "PMC1790863.json"
    path.write_text(json.dumps({"bioctype": "BioCCollection", "documents": [doc]}))
    [item] = _items(path)
    assert item.paper.authors == ["Smith, J", "Doe, Jane Q.", "Cher", "Drosophila Consortium"]


def test_flyaoc_authors_list_or_string(tmp_path):
    src = _write_jsonl(tmp_path / "c.jsonl", [dict(GOOD, authors=["Smith, J", " ", "Doe, K"]),
                                             dict(GOOD, pmcid="PMC102", authors="Smith, J; Doe, K"),
                                             dict(GOOD, pmcid="PMC103", authors=[1, 2])])
    a, b, bad = _items(src)
    assert a.paper.authors == b.paper.authors == ["Smith, J", "Doe, K"]
    assert bad.reject is not None and bad.reject.field == "authors" and "list of names" in bad.reject.reason
