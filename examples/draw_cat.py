"""Draw examples/cat.png, the image `minispark chat --image examples/cat.png` is shown with.

The project makes its own picture (no downloaded image, no licence question): an orange cat on a
blue rug, a few PIL shapes, saved as a small palette PNG.

    python examples/draw_cat.py
"""

from pathlib import Path

from PIL import Image, ImageDraw

ORANGE, DARK, PINK, GREEN, WHITE = (236, 140, 48), (120, 62, 20), (240, 150, 170), (70, 160, 80), (255, 255, 255)


def draw_cat(size: int = 256) -> Image.Image:
    image = Image.new("RGB", (size, size), (200, 225, 245))  # pale sky-blue wall
    draw = ImageDraw.Draw(image)
    s = size / 256  # every coordinate below is for a 256-pixel canvas
    box = lambda *xy: [round(v * s) for v in xy]  # noqa: E731
    draw.rectangle(box(0, 200, 256, 256), fill=(60, 90, 170))  # rug
    draw.ellipse(box(70, 120, 190, 225), fill=ORANGE, outline=DARK, width=3)  # body
    draw.arc(box(170, 120, 240, 215), start=180, end=330, fill=ORANGE, width=round(10 * s))  # tail
    draw.ellipse(box(80, 50, 180, 145), fill=ORANGE, outline=DARK, width=3)  # head
    for ear in ((88, 78, 100, 28, 126, 58), (174, 78, 162, 28, 136, 58)):
        draw.polygon(box(*ear), fill=ORANGE, outline=DARK)
    for x in (106, 140):  # eyes
        draw.ellipse(box(x, 80, x + 16, 100), fill=GREEN, outline=DARK)
        draw.ellipse(box(x + 6, 83, x + 10, 97), fill=(20, 20, 20))
    draw.polygon(box(124, 106, 136, 106, 130, 114), fill=PINK)  # nose
    for side in (-1, 1):  # whiskers
        for dy in (-4, 2, 8):
            draw.line(box(130 + side * 12, 112, 130 + side * 48, 108 + dy), fill=WHITE, width=2)
    for x in (98, 146):  # front paws
        draw.ellipse(box(x, 206, x + 24, 222), fill=ORANGE, outline=DARK, width=2)
    return image


if __name__ == "__main__":
    out = Path(__file__).resolve().parent / "cat.png"
    draw_cat().quantize(colors=16).save(out, optimize=True)
    print(f"wrote {out} ({out.stat().st_size} bytes)")
