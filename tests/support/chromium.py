"""Debian's Chromium as the e2e tests start it: headless, offline but for 127.0.0.1 (any other host does not
resolve, so a page that reaches out fails rather than waits), and no background traffic of its own."""

HEADLESS = (
    "--headless=new",
    "--no-sandbox",  # as root (a container, CI), Chromium refuses to start without it
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
)
