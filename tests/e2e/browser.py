"""What several browser tests do the same way."""

# The widths the browser tests look at a page in: a phone's (the menu folds) and a desktop's.
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 1000}


def sign_in(page, live_server, username: str, password: str) -> None:
    """Sign in through the portal's own login form and wait for the page it leads to."""
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")
