"""python3 -m hlat sync [PATH ...] [--url URL] [--token TOKEN]: the client's commands."""
import sys

USAGE = "usage: python3 -m hlat sync [PATH ...] [--url URL] [--token TOKEN] [--name NAME] [--resume]"


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE + "\n\n  sync   upload spool files (offline runs, or what a run kept while hlat serve did not "
              "answer)")
        return 0 if argv else 2
    if argv[0] == "sync":
        from .sync import main as sync
        return sync(argv[1:])
    print(f"python3 -m hlat: no command {argv[0]!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
