"""Make sure a headless Chromium is on this machine, for the HTML report's browser test.

Installs Debian's `chromium` package with apt-get when it is missing (as root, or through
non-interactive sudo). Exits 0 when a browser is there afterwards, 1 with the reason otherwise.
Part of the README's test command; needs nothing but Python 3.
"""

import os
import shutil
import subprocess
import sys

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def found() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def main() -> int:
    if found():
        return 0
    if not shutil.which("apt-get"):
        print(
            "ensure_browser: no Chromium and no apt-get: install Chromium (the report test needs it)", file=sys.stderr
        )
        return 1
    prefix = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
    if prefix is None:
        print(
            "ensure_browser: no Chromium, and not root to install it: run `apt-get install chromium` as root",
            file=sys.stderr,
        )
        return 1
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print("ensure_browser: installing Debian's chromium for the report's browser test…", file=sys.stderr)
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        if subprocess.run(prefix + command, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            print(f"ensure_browser: `{' '.join(command)}` failed", file=sys.stderr)
            return 1
    return 0 if found() else 1


if __name__ == "__main__":
    sys.exit(main())
