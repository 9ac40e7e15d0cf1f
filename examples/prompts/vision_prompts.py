"""Image prompts for VLM targets: six more pictures drawn with Pillow, and questions about all of them.

The eight pictures of make_corpus.py (shapes, charts, a clock, a receipt, ...) are reused as they
are; the ones drawn here avoid text so that their pixels do not depend on the Pillow font.

    python examples/prompts/make_training_corpus.py
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from PIL import Image, ImageDraw

OLD_IMAGES = ["shapes", "bar_chart", "house", "color_grid", "clock", "line_chart", "traffic_light", "receipt"]
NEW_IMAGES = ["pie_chart", "scatter_plot", "thermometer", "counting", "faces", "map"]

GENERIC = [
    "Describe this image in detail.", "What is the main subject of this picture?", "Write a caption for this image.",
    "Which colours dominate this image?", "Write a short poem inspired by this image.", "Give this picture a title.",
    "Describe this image to someone who cannot see it.", "How could this image be used in a lesson?",
    "List three questions someone might ask about this image.", "Is there any text in this image? If so, transcribe it.",
    "What mood does this picture convey?", "Describe the layout of this image from left to right.",
    "What would you change to make this image clearer?", "Write alt text for this image in one sentence.",
    "Count the distinct objects in this image and list them.", "Tell a two-sentence story about this picture.",
]
SPECIFIC = {
    "shapes": ["Describe the shapes in this picture and their colours.", "How many shapes are only outlined?",
               "Which shape is closest to the top-left corner?", "Write a riddle about one of these shapes."],
    "bar_chart": ["Which bar is the tallest?", "Estimate the value of each bar and compute their average.",
                  "Suggest a title and axis labels for this chart.", "Rank the bars from shortest to tallest."],
    "house": ["Describe the weather and the time of day in this scene.", "List every object in this drawing.",
              "Write a short children's story about the family who lives here."],
    "color_grid": ["List the colours in this grid row by row.", "Which colours in this grid are primary colours?",
                   "Describe a game that could be played on this grid."],
    "clock": ["What time does this clock show?", "What time will it show in two and a half hours?",
              "Explain how to read the time on a clock like this one."],
    "line_chart": ["Describe the trend shown in this chart.", "Where does the line rise fastest?",
                   "Write a one-paragraph report about what this chart might show."],
    "traffic_light": ["Which light is on, and what should a driver do?", "Explain each colour of this traffic light."],
    "receipt": ["Does the total on this receipt add up?", "Which item on this receipt is the most expensive?",
                "Turn this receipt into a table with item and price columns.",
                "If I buy two of every item on this receipt, what is the total?"],
    "pie_chart": ["Estimate the share of each slice as a percentage.", "Which slice is the largest?",
                  "Suggest what data this pie chart could represent, with labels."],
    "scatter_plot": ["Is there a correlation in this scatter plot? Describe it.", "Are there any outliers?",
                     "Sketch in words a line of best fit for these points."],
    "thermometer": ["Roughly how full is this thermometer?", "Is it hot or cold, judging by this thermometer?"],
    "counting": ["How many stars are there? How many circles?", "Are there more stars or circles, and by how many?",
                 "Group the objects in this picture by shape and colour."],
    "faces": ["Describe the expression of each face.", "Which face looks happiest?",
              "Write a short dialogue between these three faces."],
    "map": ["Describe this map: where are the river, the road and the trees?",
            "Give walking directions from the house to the bridge on this map.",
            "Where would you build a playground on this map, and why?"],
}
PAIRS = [("bar_chart", "line_chart"), ("pie_chart", "bar_chart"), ("shapes", "counting"), ("house", "map"),
         ("clock", "thermometer"), ("faces", "traffic_light"), ("scatter_plot", "line_chart"), ("color_grid", "shapes")]
PAIR_QUESTIONS = ["Compare these two images.", "What do these two pictures have in common?",
                  "Which of these two images is easier to understand, and why?"]
SUFFIXES = ["", "", "", " Answer in one sentence.", " Be precise.", " Explain your reasoning.", " Use bullet points.",
            " Keep it under 50 words.", " Answer for a young child."]
SYSTEM = ["You are a helpful assistant that describes images accurately.",
          "Only describe what is visible in the image; say when you are unsure."]


def draw_new_images(out: Path) -> None:
    """Draw the six extra pictures into ``out`` (224 px, a few hundred bytes to a few KB each)."""
    out.mkdir(parents=True, exist_ok=True)

    def canvas(color: str = "white") -> tuple[Image.Image, ImageDraw.ImageDraw]:
        im = Image.new("RGB", (224, 224), color)
        return im, ImageDraw.Draw(im)

    im, d = canvas()
    start = 0.0
    for share, color in zip([0.4, 0.25, 0.2, 0.15], ["#4472c4", "#ed7d31", "#70ad47", "#ffc000"]):
        d.pieslice((22, 22, 202, 202), start, start + 360 * share, fill=color, outline="white", width=2)
        start += 360 * share
    im.save(out / "pie_chart.png", optimize=True)

    im, d = canvas()
    rng = random.Random(7)
    d.line((20, 204, 210, 204), fill="black", width=2)
    d.line((20, 14, 20, 204), fill="black", width=2)
    for _ in range(24):
        x = rng.uniform(30, 200)
        y = 190 - 0.7 * (x - 30) + rng.uniform(-20, 20)
        d.ellipse((x - 4, y - 4, x + 4, y + 4), fill="#1f77b4")
    d.ellipse((180, 176, 188, 184), fill="#d62728")  # the outlier
    im.save(out / "scatter_plot.png", optimize=True)

    im, d = canvas()
    d.rounded_rectangle((96, 16, 128, 176), radius=16, outline="black", width=3)
    d.ellipse((84, 160, 140, 216), fill="#d62728", outline="black", width=3)
    d.rectangle((104, 70, 120, 170), fill="#d62728")
    for y in range(30, 170, 20):
        d.line((128, y, 140, y), fill="black", width=2)
    im.save(out / "thermometer.png", optimize=True)

    im, d = canvas()
    for i in range(7):
        cx, cy = 30 + (i % 4) * 50, 40 + (i // 4) * 50
        radii = [16 if k % 2 == 0 else 7 for k in range(10)]  # outer and inner corners: a solid five-pointed star
        d.polygon([(cx + r * math.cos(math.radians(90 + 36 * k)), cy - r * math.sin(math.radians(90 + 36 * k)))
                   for k, r in enumerate(radii)], fill="#f5b800")
    for i in range(4):
        cx = 35 + i * 50
        d.ellipse((cx - 14, 160, cx + 14, 188), fill="#2ca02c" if i % 2 else "#9467bd")
    im.save(out / "counting.png", optimize=True)

    im, d = canvas()
    for i, mouth in enumerate(["smile", "flat", "frown"]):
        cx = 40 + i * 72
        d.ellipse((cx - 30, 82, cx + 30, 142), fill="#ffd93b", outline="black", width=2)
        d.ellipse((cx - 14, 100, cx - 6, 108), fill="black")
        d.ellipse((cx + 6, 100, cx + 14, 108), fill="black")
        if mouth == "smile":
            d.arc((cx - 16, 106, cx + 16, 132), 20, 160, fill="black", width=3)
        elif mouth == "flat":
            d.line((cx - 12, 124, cx + 12, 124), fill="black", width=3)
        else:
            d.arc((cx - 16, 120, cx + 16, 146), 200, 340, fill="black", width=3)
    im.save(out / "faces.png", optimize=True)

    im, d = canvas("#e8f4d4")
    d.line([(0, 60), (70, 90), (140, 80), (224, 120)], fill="#3b83c4", width=14)  # river
    d.line([(110, 0), (110, 224)], fill="#8c8c8c", width=10)  # road
    d.rectangle((100, 72, 120, 96), fill="#6b4f2a")  # bridge
    for x, y in [(30, 150), (50, 175), (170, 170), (190, 190), (180, 30), (200, 50)]:
        d.ellipse((x - 10, y - 10, x + 10, y + 10), fill="#2e7d32")
    d.rectangle((140, 150, 160, 170), fill="#c0392b")  # house
    im.save(out / "map.png", optimize=True)


def image_prompts(rng: random.Random, count: int) -> list[dict]:
    """``count`` distinct image prompt records (without ids), single- and two-image, both line forms."""
    records, seen = [], set()
    names = OLD_IMAGES + NEW_IMAGES
    while len(records) < count:
        if rng.random() < 0.08:
            pair = rng.choice(PAIRS)
            text, images = rng.choice(PAIR_QUESTIONS) + rng.choice(SUFFIXES), [f"images/{n}.png" for n in pair]
        else:
            name = rng.choice(names)
            question = rng.choice(SPECIFIC[name] * 2 + GENERIC)
            text, images = question + rng.choice(SUFFIXES), [f"images/{name}.png"]
        system = rng.choice(SYSTEM) if rng.random() < 0.15 else None
        key = (text, tuple(images), system)
        if key in seen:
            continue
        seen.add(key)
        if system is None and rng.random() < 0.5:
            records.append({"category": "image", "prompt": text, "images": images})
            continue
        parts = [{"type": "image", "image": image} for image in images] + [{"type": "text", "text": text}]
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": parts}]
        records.append({"category": "image", "messages": messages})
    return records
