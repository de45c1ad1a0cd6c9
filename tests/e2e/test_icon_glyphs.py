"""Symbols used as icons render as shapes, not as empty boxes, in Debian's Chromium with the page's own fonts.

Every symbol character (Unicode categories So and Sm: ✕ ⚠ ✓ ☰ ◔ ▲ ▼ ...) in the portal's templates,
styles, scripts and apps' Python is drawn on a canvas in the page's font and compared with a character no
font has (U+0378, unassigned): a symbol that draws the same pixels has no glyph. The rack view's silent-tray
chip and badge draw their pause sign in CSS (.icon-pause), since no installed font has U+23F8."""

import unicodedata
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from inventory.health.rules import seed_default_rules
from inventory.models import ComputeTray
from tests.e2e.browser import sign_in

PASSWORD = "e2e-admin-password-1"
ROOT = Path(settings.BASE_DIR)
APPS = ("core", "inventory", "tenancy", "scheduling", "integrations", "portal")
# Templates, scripts, and the apps' Python (template tags and tables hand icons like ▲ ▼ ⚙ to templates).
SOURCES = (
    "*/templates/**/*.html",
    "templates/**/*.html",
    "static/**/*.js",
    "static/**/*.css",
    *(f"{a}/**/*.py" for a in APPS),
)
SKIP_DIRS = {".venv", "node_modules", "var", "migrations"}

# True when `char` draws the same pixels as a character no font has: the reader sees an empty box.
IS_TOFU = """([chars, font]) => {
  const canvas = document.createElement("canvas");
  canvas.width = 64; canvas.height = 64;
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  const draw = (text) => {
    ctx.clearRect(0, 0, 64, 64);
    ctx.font = `40px ${font}`;
    ctx.textBaseline = "middle";
    ctx.fillText(text, 8, 32);
    return ctx.getImageData(0, 0, 64, 64).data.join(",");
  };
  const missing = draw("\\u0378");
  return Object.fromEntries(chars.map((c) => [c, draw(c) === missing]));
}"""


def icon_symbols() -> set[str]:
    """Every symbol character the portal's templates, scripts and apps' Python may show."""
    found = set()
    for pattern in SOURCES:
        for path in ROOT.glob(pattern):
            if SKIP_DIRS & set(path.relative_to(ROOT).parts):
                continue
            found |= {c for c in path.read_text(encoding="utf-8") if unicodedata.category(c) in ("So", "Sm")}
    return found


@pytest.fixture
def admin(transactional_db, django_user_model):
    seed_datacenter(racks=1)
    return django_user_model.objects.create_superuser("e2e-admin", "e2e-admin@example.com", PASSWORD)


@pytest.mark.e2e
def test_every_icon_symbol_has_a_glyph_in_the_pages_fonts(live_server, page, admin, shots):
    symbols = icon_symbols()
    assert {"✕", "⚠", "✓", "☰", "▲", "⚙"} <= symbols  # the scan finds the icons the pages use
    sign_in(page, live_server, admin.username, PASSWORD)
    page.goto(f"{live_server.url}/inventory/racks/gb-r01/")
    fonts = {
        "text": page.evaluate("getComputedStyle(document.body).fontFamily"),
        "mono": page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--mono')"),
    }
    for kind, font in fonts.items():
        # The check itself tells a missing glyph from a present one: U+23F8 (pause) has none here.
        tofu = page.evaluate(IS_TOFU, [["\u23f8", "A"], font])
        assert tofu == {"\u23f8": True, "A": False}, (kind, font, tofu)
        missing = sorted(c for c, empty in page.evaluate(IS_TOFU, [sorted(symbols), font]).items() if empty)
        assert missing == [], f"no glyph in the {kind} font ({font}): " + ", ".join(
            f"{c} U+{ord(c):04X}" for c in missing
        )
    # For a person to look at: every symbol in the page's text font, as the pages draw it.
    page.evaluate(
        "text => { const p = document.createElement('p'); p.id = 'glyph-sheet'; p.textContent = text; "
        "document.querySelector('main').prepend(p); }",
        " ".join(sorted(symbols)),
    )
    page.locator("#glyph-sheet").screenshot(path=str(shots / "icon-glyphs.png"))


@pytest.mark.e2e
def test_the_silent_tray_chip_draws_its_pause_sign(live_server, page, admin, shots):
    seed_default_rules()
    ComputeTray.objects.filter(hostname="gb-r01-t05").update(
        last_report_at=timezone.now() - timedelta(minutes=42)
    )
    sign_in(page, live_server, admin.username, PASSWORD)
    page.goto(f"{live_server.url}/inventory/racks/gb-r01/")
    chip = page.locator("li.chip[data-silent-trays]")
    expect(chip).to_contain_text("1 tray whose node stopped reporting")
    badge = page.locator(".silent-badge")
    expect(badge).to_have_count(1)
    expect(badge).to_contain_text("silent 42")
    assert "\u23f8" not in page.content()
    for icon in (chip.locator(".icon-pause"), badge.locator(".icon-pause")):
        expect(icon).to_be_visible()
        box = icon.bounding_box()
        assert box["width"] >= 5 and box["height"] >= 6, box
        # Two bars: the left and right borders, in the text's colour, with a gap between them.
        style = icon.evaluate(
            "el => { const s = getComputedStyle(el); return [s.borderLeftWidth, s.borderRightWidth, "
            "s.borderLeftStyle, s.borderLeftColor, s.color, s.width]; }"
        )
        left, right, line, colour, text_colour, width = style
        assert line == "solid" and colour == text_colour, style
        assert float(left[:-2]) >= 2 and float(right[:-2]) >= 2, style
        assert float(width[:-2]) > float(left[:-2]) + float(right[:-2]), style
    chip.screenshot(path=str(shots / "silent-chip.png"))
    badge.screenshot(path=str(shots / "silent-badge.png"))
