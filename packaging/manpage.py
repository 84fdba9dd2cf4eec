#!/usr/bin/env python3
"""Writes primekv(1), gzipped as Debian ships man pages, from the CLI's own help: `primekv --help`
names the commands and each `primekv COMMAND --help` gives a section of its options, so the page
says what the binary it was made from accepts.

Usage: manpage.py PRIMEKV OUT.1.gz MODEL_DIR UNIT_DIR
"""

import gzip
import re
import subprocess
import sys


def run_help(binary, *args):
    out = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, check=True)
    return out.stdout


def roff(text):
    """Plain text as roff: backslashes and minus signs escaped, no line read as a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line
                     for line in text.split("\n"))


def parse(help_text):
    """CLI11's help as (description, [(heading, [(names, text)])]): the lines before "Usage:",
    then each "Heading:" with its two-column entries (a description may start on the next line
    when the names are wide, or continue over several)."""
    lines = help_text.rstrip("\n").split("\n")
    usage = next(i for i, line in enumerate(lines) if line.startswith("Usage:"))
    description = " ".join(line.strip() for line in lines[:usage] if line.strip())
    sections = []
    for line in lines[usage + 1:]:
        if not line.strip():
            continue
        if not line.startswith(" ") and line.rstrip().endswith(":"):
            sections.append((line.rstrip()[:-1], []))
            continue
        if not sections:
            continue
        entries = sections[-1][1]
        indent = len(line) - len(line.lstrip())
        names, _, text = line.strip().partition("  ")
        if entries and indent > 4:  # a description's first or next line
            entries[-1] = (entries[-1][0], (entries[-1][1] + " " + line.strip()).strip())
        else:
            entries.append((names.strip(), text.strip()))
    return description, sections


def command_section(binary, name):
    description, sections = parse(run_help(binary, name))
    out = [f'.SS "primekv {name}"', roff(description)]
    for heading, entries in sections:
        if heading != "Options":
            out += [".PP", f"\\fI{roff(heading)}\\fR"]
        for names, text in entries:
            if names.startswith("-h,--help"):
                continue
            # "\:" lets a long list of defaults break after its commas.
            breakable = roff(names).replace(",", ",\\:")
            out += [".TP", f"\\fB{breakable}\\fR", roff(text)]
    return out


def main():
    binary, out_path, model_dir, unit_dir = sys.argv[1:5]
    version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    description, sections = parse(run_help(binary))
    summary = re.sub(r"^primekv:\s*", "", description)
    commands = [entry for heading, entries in sections if heading == "Subcommands"
                for entry in entries]
    page = [
        f'.TH PRIMEKV 1 "" "{roff(version)}" "User Commands"',
        ".ad l",  # ragged right: option lists hold long unbreakable words
        ".SH NAME", f"primekv \\- {roff(summary)}",
        ".SH SYNOPSIS", ".B primekv", ".I command", ".RI [ options ]", ".br",
        ".B primekv \\-\\-version",
        ".SH DESCRIPTION",
        roff("The commands; each one's options follow under COMMANDS, as "
             "`primekv COMMAND --help` prints them."),
    ]
    for name, text in commands:
        page += [".TP", f"\\fB{roff(name)}\\fR", roff(text)]
    page += [".SH COMMANDS"]
    for name, _ in commands:
        page += command_section(binary, name)
    page += [
        ".SH EXIT STATUS",
        roff("0 on success; 1 for a bad file or model; 2 for a bad flag or value. Each error is "
             "one line on standard error naming the option or file."),
        ".SH FILES",
        ".TP", f"\\fI{roff(model_dir)}/primekv\\-retrieval.gguf\\fR",
        roff("the default model, a 4.2M-parameter Llama trained for long-context retrieval"),
        ".TP", f"\\fI{roff(unit_dir)}/primekv.service\\fR",
        roff("primekv serve on 127.0.0.1:8080 as the primekv account, keeping conversations in "
             "/var/lib/primekv (systemctl enable --now primekv)"),
        ".SH SEE ALSO",
        roff("docs/install.md, docs/server.md and docs/python.md in the PrimeKV sources."),
    ]
    with open(out_path, "wb") as f:
        # No name and a zero time in the header: the same page gives the same bytes.
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=9, mtime=0) as gz:
            gz.write(("\n".join(page) + "\n").encode("utf-8"))


if __name__ == "__main__":
    main()
