"""Running the `kvscope` command in-process, for the CLI tests of every feature."""

from kvscope.app.cli.main import main


def cli(capsys, *argv):
    """main(argv) in-process: (exit code, stdout, stderr); argparse's SystemExit becomes a code."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err
