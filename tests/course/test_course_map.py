"""The course map: one tag per chapter (llamanb.course.chapters), rendered in chapter 00, in the
capstone's "course in one page" and in the README's block, and chapter 00's map of backends is
llamanb.readiness.readiness()'s."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from llamanb.course import chapters as cm
from llamanb.errors import LlamanbError

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"


def stream_text(ipynb: Path, marker: str) -> str:
    """The printed output of the one code cell of `ipynb` whose source contains `marker`."""
    nb = nbformat.read(ipynb, as_version=4)
    found = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    assert len(found) == 1, f"{ipynb.name}: {len(found)} cells contain {marker!r}"
    return "".join(o.get("text", "") for o in found[0].outputs if o.output_type == "stream")


def test_every_chapter_is_tagged_and_lands_in_modules_that_exist():
    chs = cm.chapters()
    stems = sorted(p.stem for p in NOTEBOOKS.glob("*.py") if cm.NAME.match(p.stem))
    assert [c.stem for c in chs] == stems and len(stems) == 22
    for c in chs:
        assert c.part in cm.PARTS and c.builds and c.modules, c.stem
        for m in c.modules:
            assert importlib.util.find_spec(m) is not None, f"{c.stem}: no module {m}"
    assert {c.part for c in chs} == set(cm.PARTS)
    assert [c.number for c in chs][-2:] == ["13", "A"]          # the capstone is the last numbered
    assert [c.number for c in chs if c.part == "A"] == ["A"]


def test_the_title_is_the_chapter_heading_not_a_second_copy():
    c = cm.read_chapter(NOTEBOOKS / "01b_prefill_flops.py")
    heading = next(line for line in (NOTEBOOKS / "01b_prefill_flops.py").read_text().splitlines()
                   if line.startswith("# # "))
    assert heading.endswith(c.title) and c.number == "01b" and c.part == "I"


def write_chapter(d: Path, stem: str, tag: str | None, heading: str = "# # 07 · A chapter") -> Path:
    head = ["# ---", "# jupyter:", "#   kernelspec:", "#     name: python3"]
    if tag is not None:
        head += ["#   llamanb:"] + [f"#     {line}" for line in tag.splitlines()]
    p = d / f"{stem}.py"
    p.write_text("\n".join(head + ["# ---", "", "# %% [markdown]", heading, "", "# %%", "x = 1", ""]))
    return p


@pytest.mark.parametrize("tag, heading, says", [
    (None, "# # 07 · A chapter", "no course-map tag"),
    ("builds: x\npart: I", "# # 07 · A chapter", "lacks modules"),
    ("builds: x\nmodules: [llamanb.model]\npart: IV", "# # 07 · A chapter", "part 'IV'"),
    ("builds: x\nmodules: [numpy]\npart: I", "# # 07 · A chapter", "list of llamanb modules"),
    ("builds: x\nmodules: [llamanb.model]\npart: I", "# # A chapter", "no heading"),
])
def test_a_bad_tag_is_one_line_naming_the_chapter(tmp_path, tag, heading, says):
    p = write_chapter(tmp_path, "07_x", tag, heading)
    with pytest.raises(LlamanbError, match=says) as e:
        cm.read_chapter(p)
    assert "07_x.py" in str(e.value) and "\n" not in str(e.value)


def test_the_map_groups_chapters_by_part_in_reading_order(tmp_path):
    for stem, part in (("05_b", "II"), ("00_a", "I"), ("13_c", "III"), ("01_d", "I")):
        write_chapter(tmp_path, stem, f"builds: b{stem}\nmodules: [llamanb.model]\npart: {part}",
                      f"# # {stem[:2]} · T{stem}")
    chs = cm.chapters(tmp_path)
    assert [(h, [c.stem for c in cs]) for h, cs in cm.by_part(chs)] == [
        (cm.PARTS["I"], ["00_a", "01_d"]), (cm.PARTS["II"], ["05_b"]), (cm.PARTS["III"], ["13_c"])]
    md = cm.markdown(chs)
    assert md.index("### Part I") < md.index("[01](notebooks/01_d.ipynb)") < md.index("### Part II")
    assert cm.landed_in(chs) == {"llamanb.model": ["00", "01", "05", "13"]}


def test_readme_block_is_rewritten_in_place_and_checked(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{cm.START}\nold map\n{cm.END}\nafter\n")
    run = [sys.executable, "-m", "llamanb.course", "map"]
    stale = subprocess.run(run + ["--check-readme", "--readme", str(readme)], capture_output=True,
                           text=True, cwd=ROOT)
    assert stale.returncode == 1 and "stale" in stale.stderr
    wrote = subprocess.run(run + ["--write-readme", "--readme", str(readme)], capture_output=True,
                           text=True, cwd=ROOT)
    assert wrote.returncode == 0, wrote.stderr
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n") and text.endswith(f"{cm.END}\nafter\n")
    assert "old map" not in text and cm.markdown() in text
    ok = subprocess.run(run + ["--check-readme", "--readme", str(readme)], capture_output=True,
                        text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("content", ["# no markers\n", f"{cm.END}\n{cm.START}\n",
                                     f"{cm.START}\n{cm.START}\n{cm.END}\n"])
def test_a_readme_without_a_proper_block_is_left_alone(tmp_path, content):
    readme = tmp_path / "README.md"
    readme.write_text(content)
    r = subprocess.run([sys.executable, "-m", "llamanb.course", "map", "--write-readme", "--readme",
                        str(readme)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert readme.read_text() == content


def test_bad_arguments_are_one_line():
    r = subprocess.run([sys.executable, "-m", "llamanb.course", "map", "--bogus"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_the_readme_course_map_is_current():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    if cm.START not in text and cm.END not in text:
        pytest.skip("README.md has no course-map block yet")
    assert cm.with_map(text) == text, "stale: run `python -m llamanb.course map --write-readme`"


@pytest.mark.parametrize("stem", ["00_overview", "13_hardware_chat"])
def test_the_chapters_print_the_current_map(stem):
    assert stream_text(NOTEBOOKS / f"{stem}.ipynb", "print(text(course))").startswith(cm.text() + "\n"), \
        f"{stem}.ipynb shows a stale course map: rebuild it"


def test_chapter_00_maps_the_backends_readiness_knows():
    from llamanb.readiness import readiness

    rows = readiness()
    printed = stream_text(NOTEBOOKS / "00_overview.ipynb", "print(f\"{r.name:<18} {r.runs_on}\")")
    assert [line.split()[:2] for line in printed.splitlines()[:len(rows)]] == \
        [[r.name, r.runs_on.split()[0]] for r in rows]
    assert f"{len(rows)} backends;" in printed
    source = (NOTEBOOKS / "00_overview.py").read_text()
    assert "readiness()" in source and "probe()" not in source
    # the figure's seam names the Backend contract's calls, the ones Engine.step makes
    from llamanb.engine.backend import Backend
    for call in ("embed()", "layers()", "block()", "head()"):
        assert call in source and hasattr(Backend, call[:-2])
