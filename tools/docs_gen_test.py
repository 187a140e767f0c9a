"""Tests of tools/docs_gen.py's rules on pages made up for them: each rule flags what it is for
and passes what it is not for."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docs_gen  # noqa: E402

TABLE = "| model | x DDP |\n|---|---|\n| resnet18 | 0.85x |\n| gpt2 | 0.88x |\n"


def problems_of(rule, text, page="docs/page.md"):
    problems = []
    rule(page, text, problems)
    return problems


class FiguresTest(unittest.TestCase):
    numbers = docs_gen.cells_numbers([TABLE])

    def check(self, text):
        problems = []
        docs_gen.check_figures("docs/page.md", text, self.numbers, problems)
        return problems

    def test_a_figure_of_a_table_passes(self):
        self.assertEqual(self.check("ResNet-18 ran at 0.85x DDP, the GPT-style model at 0.88x.\n"), [])
        self.assertEqual(self.check("Between 0.85-0.88x DDP.\n"), [])

    def test_a_figure_of_no_table_fails(self):
        self.assertEqual(len(self.check("ResNet-18 ran at 0.84x DDP.\n")), 1)
        self.assertEqual(len(self.check("It reached 88.80% accuracy in 28.7 s.\n")), 2)
        self.assertEqual(len(self.check("Between 0.85-0.89x DDP.\n")), 1)
        self.assertEqual(len(self.check("| hand | 0.91x |\n")), 1)  # a hand-written table too

    def test_settings_and_code_are_not_figures(self):
        self.assertEqual(self.check("Links at 1 Gbit/s, a lease of 30 s, HL8 and `--noise=0.05 0.9x`.\n"), [])
        self.assertEqual(self.check("```\nwall time 28.7 s\n```\n"), [])

    def test_generated_blocks_are_not_prose(self):
        text = "<!-- table: x -->\n| a | 0.99x |\n\n`cmd` (VM, 2026-12-03)\n<!-- /table -->\n"
        self.assertEqual(self.check(text), [])
        self.assertEqual(problems_of(docs_gen.check_history, text), [])


class PageRulesTest(unittest.TestCase):
    def test_dates_hashes_and_issue_numbers(self):
        self.assertEqual(len(problems_of(docs_gen.check_history, "## Partitions (2026-11-28)\n")), 1)
        self.assertEqual(len(problems_of(docs_gen.check_history, "Fixed in ab5be94, before.\n")), 1)
        self.assertEqual(len(problems_of(docs_gen.check_history, "As issue 50 asked.\n")), 1)
        self.assertEqual(problems_of(docs_gen.check_history, "A 4 MB MLP at HL8, `deadbeef1`.\n"), [])
        self.assertEqual(problems_of(docs_gen.check_history, "## [0.2.0] - 2026-11-23\n", "CHANGELOG.md"), [])

    def test_fragments(self):
        self.assertEqual(len(problems_of(docs_gen.check_fragments, "## Optimizers\n\nrun on the server.\n")), 1)
        self.assertEqual(len(problems_of(docs_gen.check_fragments, "## A\n\n, and it can be yours.\n")), 1)
        self.assertEqual(problems_of(docs_gen.check_fragments, "## A\n\nThe server runs them,\nand steps.\n"), [])
        self.assertEqual(problems_of(docs_gen.check_fragments, "## A\n\n`--flag` does this.\n- a list\n"), [])

    def test_references(self):
        texts = {"docs/a.md": "# A\n\n## How it scales\n", "docs/b.md": ""}
        problems = []
        docs_gen.check_references("docs/b.md", 'See `docs/a.md`, "How it scales".\n'
                                  "[x](docs/a.md#how-it-scales)\n", texts, problems)
        self.assertEqual(problems, [])
        for line in ('See docs/a.md, "Validated at 50 Mbit/s".\n', "[x](docs/a.md#validated)\n",
                     'See docs/c.md, "How it scales".\n'):
            problems = []
            docs_gen.check_references("docs/b.md", line, texts, problems)
            self.assertEqual(len(problems), 1, line)

    def test_bounds(self):
        self.assertEqual(len(problems_of(docs_gen.check_bounds, "line\n" * 401)), 1)
        self.assertEqual(problems_of(docs_gen.check_bounds, "line\n" * 400), [])
        self.assertEqual(len(problems_of(docs_gen.check_bounds, "line\n" * 151, "README.md")), 1)


HELPFULL = """prog: what it does.

  Flags from ./absl/flags/parse.cc:
    --flagfile (comma-separated list of files to load flags from); default: ;

  Flags from server/daemon/flags.cc:
    --lr (the learning rate (of the
      optimizer)); default: 0.05;
    --wire_dtype (f32 | bf16); default: "f32";

Try --helpfull to get a list of all flags or --help=substring shows help for
flags which include specified substring in either in the name, or description or
path.
"""


class HelpfullTest(unittest.TestCase):
    def test_every_flag_is_read_the_last_one_too(self):
        with tempfile.TemporaryDirectory() as d:
            binary = os.path.join(d, "prog")
            with open(binary, "w") as f:
                f.write(f"#!/bin/sh\ncat <<'EOF'\n{HELPFULL}EOF\nexit 1\n")
            os.chmod(binary, 0o755)
            self.assertEqual([f for _, f, _, _ in docs_gen.parse_helpfull(binary)], ["flagfile", "lr", "wire_dtype"])
            self.assertEqual(docs_gen.helpfull_flags(binary), [("lr", "0.05", "the learning rate (of the optimizer)"),
                                                               ("wire_dtype", '"f32"', "f32 \\| bf16")])


class GeneratedTablesTest(unittest.TestCase):
    def test_a_table_edited_by_hand_is_found(self):
        page = "Intro.\n\n<!-- table: shard_step -->\n<!-- /table -->\n"
        problems = []
        made = docs_gen.regenerate(page, [], problems, "docs/page.md")
        self.assertEqual(problems, [])
        self.assertIn("summed as slices arrive", made)
        self.assertEqual(docs_gen.regenerate(made, [], problems, "docs/page.md"), made)
        edited = made.replace("3.3 ms", "2.9 ms")
        self.assertNotEqual(docs_gen.regenerate(edited, [], problems, "docs/page.md"), edited)

    def test_an_unknown_table_is_a_problem(self):
        problems = []
        docs_gen.regenerate("<!-- table: nothing -->\n<!-- /table -->\n", [], problems, "docs/page.md")
        self.assertEqual(len(problems), 1)

    def test_every_table_renders_from_its_source(self):
        for name in docs_gen.TABLES:
            with self.subTest(table=name):
                text = docs_gen.render(name, [])
                self.assertTrue(text.startswith("| "), text[:80])
                self.assertIn("bench/results/", text)


if __name__ == "__main__":
    unittest.main()
