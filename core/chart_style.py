"""What every plotly chart of the portal shares: the font, the modebar's buttons, and colours that read on the
light and the dark theme alike.

The page's theme follows prefers-color-scheme (static/css/portal.css), which the server cannot know: figures
have transparent backgrounds (the panel's surface shows through) and text and grid colours that read on both
surfaces. static/portal/live_charts.js then recolours each drawn chart from the page's CSS custom properties
(--text, --muted, --border, --surface), and again when the theme changes. Pure constants, no Django.
"""

FONT = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica Neue, Arial, sans-serif"
TRANSPARENT = "rgba(0,0,0,0)"
TEXT = "#737d8c"  # about 4:1 against both #ffffff and the dark theme's #161b22
GRID = "rgba(127,127,127,0.28)"
CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}
