"""Word lists for the chat and writing parts of the training corpus (data only, no logic).

Everything here was written for minispark; nothing is taken from a public evaluation set. Topics
used by the held-out split live in heldout_prompts.py and must not be added here.

    python examples/prompts/make_training_corpus.py
"""

TOPICS = {
    "science": [
        "photosynthesis", "plate tectonics", "the water cycle", "black holes", "the speed of light",
        "how vaccines work", "DNA replication", "natural selection", "the periodic table", "static electricity",
        "magnetism", "the Doppler effect", "entropy", "radioactive decay", "the structure of an atom",
        "the immune system", "cloud formation", "ocean currents", "volcanic eruptions", "the nitrogen cycle",
        "antibiotic resistance", "how the eye sees colour", "sound waves", "friction", "buoyancy",
        "chemical bonds", "acids and bases", "the greenhouse effect", "the ozone layer", "lunar eclipses",
        "the life cycle of a star", "gravity on other planets", "how batteries store energy", "superconductors",
        "the placebo effect", "circadian rhythms", "how muscles grow", "the gut microbiome", "mitochondria",
        "stem cells", "the Big Bang theory", "dark matter", "comets and asteroids", "auroras", "rainbows",
        "how bees communicate", "bird migration", "coral reefs", "photosynthesis in algae", "fungi networks",
        "how fireflies glow", "the human skeleton", "blood types", "how fever helps the body", "allergies",
        "the carbon cycle", "how soap removes grease", "crystal formation", "the states of matter",
        "half-life", "nuclear fusion", "nuclear fission", "how lasers work", "quantum tunnelling",
        "the uncertainty principle", "relativity and time dilation", "exoplanet detection", "tardigrades",
        "why ice floats", "desalination", "how earthquakes are measured", "glaciers", "hurricanes",
    ],
    "technology": [
        "how the internet routes data", "public-key cryptography", "how a CPU executes instructions",
        "machine learning", "neural networks", "how search engines rank pages", "cloud computing",
        "how GPS works", "blockchains", "how Wi-Fi works", "compression algorithms", "operating systems",
        "how touchscreens work", "solid-state drives", "computer viruses", "two-factor authentication",
        "how QR codes store data", "open-source software", "version control", "how email is delivered",
        "the domain name system", "virtual machines", "containers in software deployment", "5G networks",
        "electric motors", "how 3D printers work", "how solar panels work", "wind turbines", "heat pumps",
        "lithium-ion batteries", "self-driving cars", "speech recognition", "how cameras focus",
        "how microwaves heat food", "how noise-cancelling headphones work", "fibre-optic cables",
        "barcodes", "how elevators are kept safe", "how a refrigerator works", "how airplanes stay in the air",
        "how rockets reach orbit", "satellites", "how a bicycle gear system works", "hydroelectric power",
        "smart home devices", "password managers", "recommendation algorithms", "large language models",
        "floating-point numbers", "how a compiler works", "garbage collection in programming languages",
        "databases and indexes", "how spreadsheets calculate formulas", "digital audio sampling",
        "image compression", "how video streaming adapts to bandwidth", "error-correcting codes",
    ],
    "history": [
        "the printing press", "the Industrial Revolution", "the Silk Road", "the Renaissance",
        "ancient Egyptian pyramids", "the Roman aqueducts", "the invention of writing", "the Bronze Age",
        "the history of the bicycle", "the Apollo moon landings", "the fall of the Berlin Wall",
        "the history of vaccination", "the spice trade", "the origins of the Olympic Games",
        "the history of paper money", "the invention of the telephone", "the age of sail",
        "the history of chess", "medieval castles", "the history of the calendar", "the Great Wall of China",
        "the history of coffee", "the invention of the steam engine", "the early history of aviation",
        "the history of public libraries", "the origins of democracy in Athens", "the history of maps",
        "the history of tea", "the Viking voyages", "the history of timekeeping", "the history of the postal service",
        "the Inca road system", "the history of glassmaking", "the development of antibiotics",
        "the history of photography", "the history of the piano", "the Hanseatic League",
        "the history of railways", "the Library of Alexandria", "the history of the internet",
    ],
    "economics": [
        "inflation", "compound interest", "supply and demand", "opportunity cost", "index funds",
        "how central banks set interest rates", "the stock market", "bonds", "exchange rates",
        "comparative advantage", "recessions", "minimum wage debates", "how insurance works",
        "credit scores", "mortgages", "taxes and tax brackets", "the gig economy", "universal basic income",
        "price elasticity", "monopolies", "how startups raise money", "budgeting", "emergency funds",
        "diversification in investing", "pension plans", "the cost of living", "behavioural economics",
        "sunk cost fallacy", "microloans", "trade deficits", "cryptocurrency volatility", "economies of scale",
    ],
    "health": [
        "a balanced diet", "the benefits of regular exercise", "sleep hygiene", "hydration", "stress",
        "how to build a running habit", "strength training for beginners", "posture at a desk",
        "the basics of first aid", "mental health stigma", "meditation", "burnout", "screen time and eyes",
        "how caffeine affects the body", "vitamin D", "dietary fibre", "sugar and energy levels",
        "stretching", "heart rate zones", "how habits form", "seasonal affective disorder",
        "ergonomic workstations", "managing chronic back pain", "healthy snacks", "mindful eating",
        "the effects of loneliness", "walking as exercise", "protein needs", "sun protection",
    ],
    "arts": [
        "impressionist painting", "the rules of a sonnet", "jazz improvisation", "perspective in drawing",
        "colour theory", "film editing", "the structure of a symphony", "street art", "origami",
        "how to read a poem", "the hero's journey in storytelling", "stand-up comedy writing",
        "photography composition", "watercolour techniques", "the history of animation",
        "how musicals are made", "calligraphy", "pottery", "minimalism in design", "typography",
        "world music traditions", "the role of a film director", "graphic novels", "improv theatre",
        "architecture styles", "the golden ratio in art", "sculpture materials", "podcast production",
    ],
    "everyday": [
        "composting", "recycling plastics", "how to care for houseplants", "decluttering", "meal prepping",
        "time management", "public speaking", "negotiating a salary", "writing a CV", "job interviews",
        "remote work", "learning a new language", "studying effectively", "note-taking methods",
        "personal budgeting", "saving for a holiday", "home energy saving", "basic car maintenance",
        "choosing a laptop", "online privacy", "spotting misinformation", "raising a puppy", "caring for a cat",
        "gardening on a balcony", "baking bread", "making coffee at home", "cooking rice", "fermentation",
        "knife skills in the kitchen", "food safety", "packing light for travel", "jet lag", "camping",
        "cycling in a city", "first-time home buying", "renting an apartment", "moving house",
        "planning a wedding", "hosting a dinner party", "friendship as an adult", "giving feedback",
        "conflict at work", "setting boundaries", "volunteering", "digital minimalism", "journaling",
    ],
    "nature": [
        "how trees communicate", "wetlands", "desert ecosystems", "rainforests", "the Arctic tundra",
        "bees and pollination", "octopus intelligence", "whale songs", "the life cycle of a butterfly",
        "how birds fly", "wolves and ecosystems", "mushrooms", "invasive species", "urban wildlife",
        "soil health", "seasons", "tides", "the phases of the moon", "weather fronts", "lightning",
        "river deltas", "mountain formation", "caves", "coastal erosion", "sea turtles", "penguins",
    ],
    "society": [
        "how elections work", "the separation of powers", "human rights", "freedom of the press",
        "urban planning", "public transport", "the role of museums", "how laws are made", "jury duty",
        "international trade", "migration", "the United Nations", "local government", "census data",
        "philosophy of ethics", "stoicism", "utilitarianism", "the trolley problem", "free will",
        "critical thinking", "logical fallacies", "the scientific method", "peer review", "statistics in the news",
        "linguistics and how languages change", "sign languages", "dialects", "etymology", "world religions",
    ],
}

AUDIENCES = [
    "a curious eight-year-old", "a ten-year-old", "a high-school student", "a first-year university student",
    "a busy executive", "my grandmother", "a retired engineer", "a non-native English speaker",
    "someone with no background in the subject", "a teacher preparing a lesson", "a journalist",
    "a software developer", "a nurse", "a small-business owner", "a group of tourists", "a skeptical friend",
    "a new employee", "a parent helping with homework", "a university professor", "a teenager",
    "an artist", "a farmer", "a policy maker", "a podcast audience", "a book club",
]

TONES = [
    "formal", "friendly", "playful", "warm", "neutral", "enthusiastic", "calm", "humorous", "encouraging",
    "matter-of-fact", "poetic", "persuasive", "empathetic", "professional", "light-hearted", "serious",
]

CONSTRAINTS = [
    "Keep it under {n} words.", "Use bullet points.", "Answer in a numbered list.",
    "Use at most {k} sentences.", "Include one concrete example.", "Avoid jargon.",
    "Use a friendly, conversational tone.", "Write in a formal tone.", "End with a one-sentence summary.",
    "Format the answer in Markdown with short headings.", "Start with a one-line answer, then explain.",
    "Include a short analogy.", "Add a 'Key takeaways' section at the end.", "Put the most important point first.",
    "Use a table if it helps.", "Be brief.", "Explain your reasoning.", "Write it as a short newsletter item.",
    "Give {k} examples.", "Do not use more than {k} paragraphs.", "Use simple words only.",
    "Write it in the second person.", "Mention one common mistake.", "Finish with a question for the reader.",
]

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are a concise assistant. Answer in at most five sentences.",
    "You are a patient tutor who explains step by step.",
    "You are a friendly assistant who writes in plain language.",
    "You are an expert science communicator.",
    "You are a careful assistant. If something is uncertain, say so.",
    "You are a cheerful assistant for a family audience.",
    "You are a practical coach who gives actionable advice.",
    "Answer as briefly as possible while staying correct.",
    "You are a knowledgeable assistant. Use Markdown formatting where it helps.",
    "You are an assistant for busy professionals: lead with the answer.",
    "You are a thoughtful assistant who considers several viewpoints.",
    "You help beginners. Define any technical term you use.",
    "You are a calm and supportive assistant.",
    "Reply in a structured way: summary first, then details.",
]

SITUATIONS = [
    "I just moved to a new city and don't know anyone", "I keep procrastinating on a big project at work",
    "My manager gives me vague feedback", "I want to switch careers into data analysis",
    "I have three job offers and can't decide", "My roommate never cleans the kitchen",
    "I want to start running but I get bored quickly", "I'm nervous about giving a presentation next week",
    "I spend too much money on takeaway food", "My teenager doesn't talk to me much anymore",
    "I want to learn the guitar at forty", "I have trouble falling asleep before midnight",
    "My small online shop gets visitors but few sales", "A friend borrowed money and hasn't paid it back",
    "I feel overwhelmed by email", "I'm planning my first solo trip abroad", "I want to read more books",
    "My team misses deadlines every sprint", "I was passed over for a promotion",
    "I want to eat healthier without spending much", "My neighbour plays loud music late at night",
    "I'm starting university in a month", "I want to save for a house deposit",
    "I have to give a eulogy for my grandfather", "I want to volunteer but don't know where to start",
    "I keep forgetting what I study", "I'm a new manager and one report is underperforming",
    "I want to get back into shape after an injury", "My houseplants keep dying",
    "I'm writing my first novel and feel stuck in the middle", "I want to reduce my screen time",
    "My parents are getting older and need more help", "I need to negotiate rent with my landlord",
    "I'm organising a fundraiser for a local school", "I have a long commute and want to use it well",
    "I want to host a dinner party for ten people on a budget", "I struggle to make small talk",
    "I'm working remotely and feel isolated", "I need to choose between two university courses",
    "My dog pulls on the lead during walks", "I want to start a vegetable garden in a small yard",
    "I'm retiring next year and worry about boredom", "I want to learn to cook beyond pasta",
    "I got harsh comments on my first open-source pull request", "My startup co-founder and I disagree on strategy",
    "I keep saying yes to too many commitments", "I want to improve my handwriting",
    "I'm preparing for a marathon in six months", "My child is being left out at school",
    "I have a job interview for a role slightly above my experience", "I want to travel more sustainably",
    "I need to write a difficult apology to a colleague", "I want to start investing a small amount each month",
    "My laptop is slow and I can't afford a new one", "I'm learning to code and feel like an impostor",
    "I want to build a habit of daily journaling", "I need to plan a week of family meals",
    "I'm moving in with my partner for the first time", "I want to be more confident in meetings",
    "I'm caring for a relative and have no time for myself", "I want to learn photography with my phone",
]

HOW_TO = [
    "make a monthly budget", "change a flat bicycle tyre", "write a good cover letter", "brew pour-over coffee",
    "set up a home network", "plan a vegetable garden", "train for a 10 km run", "learn touch typing",
    "bake a simple loaf of bread", "prepare for a job interview", "organise a small closet",
    "back up photos safely", "clean a cast-iron pan", "give constructive feedback", "take better notes in lectures",
    "start a podcast", "write a short story", "build a campfire safely", "negotiate a car price",
    "teach a child to ride a bike", "make a simple website", "learn a piece of music by ear",
    "write a thank-you letter", "reduce food waste at home", "care for a sourdough starter", "paint a room",
    "hang a heavy mirror", "prepare a tax return checklist", "plan a road trip", "memorise a speech",
    "start meditating", "introduce two cats to each other", "pick a good password", "run an effective meeting",
    "read a scientific paper", "make friends as an adult", "repot a plant", "fix a dripping tap",
    "iron a shirt", "fold a fitted sheet", "cook perfect rice on the stove", "make a vinaigrette",
    "sharpen a kitchen knife", "write a wedding toast", "recover from a bad night's sleep",
    "plan a surprise party", "learn basic sign language", "prepare for a long hike", "set goals for the new year",
    "ask for a raise", "resign from a job gracefully", "onboard a new team member", "write clear documentation",
    "photograph the night sky", "study for an exam in two weeks", "pack a suitcase efficiently",
    "make a family tree", "start a book club", "keep a reading log", "learn to juggle three balls",
]

COMPARISONS = [
    ("renting", "buying a home"), ("electric cars", "hybrid cars"), ("tea", "coffee"),
    ("a gym membership", "home workouts"), ("e-books", "paper books"), ("cats", "dogs as pets"),
    ("Python", "JavaScript for a first language"), ("a laptop", "a tablet for students"),
    ("index funds", "individual stocks"), ("living in a city", "living in the countryside"),
    ("trains", "planes for travel within Europe"), ("public schools", "homeschooling"),
    ("solar panels", "a heat pump as a first home upgrade"), ("running", "swimming"),
    ("weather", "climate"), ("a virus", "a bacterium"), ("RAM", "storage"), ("mitosis", "meiosis"),
    ("a simile", "a metaphor"), ("socialism", "capitalism"), ("stocks", "bonds"),
    ("a debit card", "a credit card"), ("a Roth-style pension", "a traditional pension"),
    ("baking soda", "baking powder"), ("a crocodile", "an alligator"), ("a comet", "an asteroid"),
    ("an LED bulb", "an incandescent bulb"), ("freelancing", "full-time employment"),
    ("a podcast", "a blog for sharing ideas"), ("SQL databases", "NoSQL databases"),
    ("a novel", "a novella"), ("baroque music", "classical-era music"), ("acrylic", "oil paint"),
    ("yoga", "pilates"), ("hiking boots", "trail runners"), ("a tent", "a hammock for camping"),
    ("learning online", "learning in a classroom"), ("a mentor", "a coach"),
    ("weight", "mass"), ("speed", "velocity"), ("empathy", "sympathy"), ("ethics", "morals"),
    ("a republic", "a constitutional monarchy"), ("latitude", "longitude"), ("a lake", "a pond"),
    ("frozen vegetables", "fresh vegetables"), ("a will", "a trust"), ("a hurricane", "a tornado"),
]

CREATIVE_FORMS = [
    "haiku", "limerick", "sonnet", "free-verse poem", "short story of about 200 words", "fable with a moral",
    "dialogue between two characters", "diary entry", "letter", "song chorus", "riddle", "six-word story",
    "bedtime story", "dramatic monologue", "short scene for a play", "postcard message", "acrostic poem",
    "news report from the year 2150", "flash-fiction piece under 150 words", "ballad of four stanzas",
]

CREATIVE_SUBJECTS = [
    "a lighthouse keeper's last night on duty", "a cat who collects keys", "the first snow of winter",
    "a robot learning to garden", "an old bicycle in a shed", "a city at 4 a.m.", "a lost umbrella",
    "a grandmother's recipe book", "the last bookshop in town", "a dragon who is afraid of fire",
    "two strangers sharing a bus shelter", "a message in a bottle", "a village without clocks",
    "the smell of rain on hot pavement", "a chess game in a park", "an astronaut missing home",
    "a bakery that opens at midnight", "a forgotten birthday", "a tree that remembers everything",
    "the sound of a train at night", "a shy ghost", "a kite stuck in a tree", "the ocean in winter",
    "a detective who is a parrot", "a map that changes every day", "a town festival", "a spider's web at dawn",
    "a retired circus elephant", "an empty swimming pool", "a wedding in the rain", "the moon's day off",
    "a child's first day at school", "a notebook found on a train", "a fox in the city", "a broken violin",
    "a journey across a desert", "a lighthouse in fog", "autumn leaves", "a kitchen at dawn",
    "a time traveller stuck in a queue", "a garden after a storm", "a friendship between a whale and a gull",
    "a painter who can't see blue", "a library after closing time", "a mountain climber's doubt",
]

BRAINSTORM = [
    "a rainy Saturday with two kids", "a team-building event for remote workers",
    "a science fair project for a 12-year-old", "gifts for a friend who loves gardening",
    "names for a small bakery", "names for a hiking club", "a first date that isn't dinner",
    "side projects to learn web development", "ways to reuse glass jars", "a themed birthday party for a six-year-old",
    "blog post topics for a cycling blog", "ways to make a small flat feel bigger", "weekend trips without a car",
    "low-cost date nights", "fundraising events for a school", "ways to practise a language daily",
    "board games for a family of five", "healthy breakfasts that take five minutes", "questions to ask a mentor",
    "icebreakers for a workshop", "a short-story prompt about the sea", "slogans for a recycling campaign",
    "things to do in a city on a layover", "podcast episode ideas about local history",
    "ways to celebrate a colleague's retirement", "new hobbies for someone who likes working with their hands",
    "uses for leftover rice", "creative ways to learn the times tables", "a garden theme for a small yard",
    "holiday traditions for a new family", "activities for a company picnic", "YouTube video ideas about cooking",
]

ISSUES = [
    "a four-day work week", "school uniforms", "banning cars from city centres", "homework for young children",
    "nuclear power", "remote work becoming the norm", "a sugar tax", "voting at sixteen", "space exploration funding",
    "zoos", "standardised testing", "social media age limits", "tipping culture", "daylight saving time",
    "universal basic income", "open-plan offices", "self-checkout machines", "year-round schooling",
    "public funding for the arts", "congestion charges", "lab-grown meat", "learning Latin in schools",
]

# Writing: names, places and things the passage composer fills in.
NAMES = [
    "Ava", "Ben", "Chloe", "Dev", "Elif", "Femi", "Grace", "Hiro", "Ines", "Jonas", "Kira", "Liam", "Maya",
    "Noor", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tomas", "Uma", "Viktor", "Wen", "Yusuf", "Zara",
    "Amara", "Bruno", "Carmen", "Dmitri", "Esther", "Farah", "Gustav", "Hana", "Ivan", "Julia", "Kenji",
    "Leila", "Mateo", "Nadia", "Oscar", "Paulo", "Rania", "Sofia", "Tariq", "Ugo", "Vera", "Will", "Ximena",
]
TOWNS = [
    "Millbrook", "Eastfield", "Harrowgate", "Port Alden", "Cedar Falls", "Westmere", "Ravensholm", "Lindale",
    "Brightwater", "Oakhurst", "Stonebridge", "Marlow Bay", "Kingsferry", "Ashford Hill", "Fernvale",
]
COMPANIES = [
    "Northwind Tools", "Bluepeak Coffee", "Orbit Labs", "Greenleaf Foods", "Harbor Bikes", "Quill & Co.",
    "Sunrise Solar", "Maple Analytics", "Pebble Games", "Tidewater Travel", "Copperline Audio", "Fable Books",
]
PRODUCTS = [
    "a foldable electric scooter", "a reusable coffee cup", "a smart plant pot", "a noise-cancelling sleep mask",
    "a solar phone charger", "a modular bookshelf", "a language-learning app", "a budgeting app",
    "a compact air purifier", "a waterproof hiking jacket", "a cast-iron pizza pan", "a kids' coding kit",
    "a mechanical keyboard", "a bamboo cutting board", "a portable projector", "an insulated lunch box",
]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
PROJECTS = [
    "the website redesign", "the new onboarding process", "the spring product launch", "the office move",
    "the customer survey", "the mobile app release", "the annual budget", "the warehouse upgrade",
    "the charity run", "the supplier contract", "the summer internship programme", "the data migration",
]

CODE_SYSTEM_PROMPTS = [
    "You are a senior software engineer who values readable code.",
    "You are a code reviewer. Point out bugs before style issues.",
    "You are a programming tutor. Explain your code after writing it.",
    "Answer with code first, then a brief explanation.",
    "You are a careful engineer: mention edge cases and complexity.",
]
MATH_SYSTEM_PROMPTS = [
    "You are a math teacher. Show your working clearly.",
    "You are a patient tutor who explains step by step.",
    "Solve the problem, then state the final answer on its own line.",
    "You are a concise assistant. Give the answer with a one-line justification.",
]
WRITING_SYSTEM_PROMPTS = [
    "You are a professional editor. Be precise and constructive.",
    "You are a creative writing partner with a vivid style.",
    "You are a communications specialist who writes clear, friendly text.",
    "Keep the meaning of any text you rewrite; do not invent facts.",
]

# Multi-turn: (first question, assistant answer) written for minispark, then a follow-up.
CHAT_EXCHANGES = [
    ("Can you recommend a good first programming language?",
     "Python is a popular first language: its syntax is readable, it has a huge community, and it is used for "
     "scripting, data work and web development."),
    ("How often should a beginner run each week?",
     "Three runs a week with a rest day between them is a good start. Keep the pace easy enough to talk."),
    ("What is a good way to organise my week?",
     "Plan on Sunday evening: list your top three priorities, block time for each in your calendar, and leave "
     "some buffer for surprises."),
    ("What are some easy houseplants for beginners?",
     "Pothos, snake plants, spider plants and ZZ plants are forgiving: they tolerate low light and irregular watering."),
    ("Why do leaves change colour in autumn?",
     "As days shorten, trees stop making chlorophyll. The green fades and reveals yellow and orange pigments, "
     "while some trees also make red ones."),
    ("How can I save money on groceries?",
     "Plan meals for the week, shop with a list, buy staples in bulk, cook in batches and use leftovers before "
     "buying more."),
    ("What is inflation?",
     "Inflation is the general rise in prices over time, which means each unit of money buys a little less."),
    ("How do I start learning to draw?",
     "Start with simple shapes and everyday objects, draw a little every day, and copy from life rather than photos "
     "when you can."),
    ("What should I pack for a weekend camping trip?",
     "A tent, sleeping bag and mat, warm layers, rain gear, a stove with fuel, simple food, water, a headlamp and "
     "a first-aid kit."),
    ("How does compound interest work?",
     "You earn interest on your original amount and on the interest already added, so growth speeds up over time."),
    ("What is the difference between weather and climate?",
     "Weather is what the atmosphere does over hours and days; climate is the average pattern over decades."),
    ("How can I become a better listener?",
     "Give the speaker your full attention, avoid planning your reply while they talk, ask open questions and "
     "summarise what you heard."),
    ("What are the benefits of learning a second language?",
     "It opens up travel and work, lets you connect with more people, and exercises memory and attention."),
    ("How do I make a good cup of tea?",
     "Use freshly boiled water, the right temperature for the tea, steep for three to five minutes for black tea, "
     "and remove the leaves so it does not turn bitter."),
    ("Why is sleep important?",
     "During sleep the body repairs tissue and the brain consolidates memories; too little sleep hurts mood, "
     "focus and health."),
    ("What is a budget?",
     "A budget is a plan for your money: it lists expected income and assigns it to spending, saving and bills."),
    ("How do vaccines work?",
     "A vaccine shows the immune system a harmless piece or copy of a germ so it can build defences before meeting "
     "the real thing."),
    ("Can you suggest a simple weeknight dinner?",
     "A vegetable stir-fry with rice: fry garlic and ginger, add sliced vegetables and tofu or chicken, then soy "
     "sauce and a little honey."),
    ("What makes a good presentation?",
     "One clear message, a simple structure, few words per slide, examples the audience cares about, and practice."),
    ("How do I keep a conversation going with someone new?",
     "Ask open questions, listen for details you can follow up on, and share a little about yourself in return."),
]
FOLLOW_UPS = [
    "Can you make that shorter?", "Can you give me a concrete example?", "Explain that to a ten-year-old.",
    "What would you add if I had more time?", "Turn that into a table.", "What are the most common mistakes?",
    "Can you expand on the second point?", "Is there any evidence for that?", "Put that into a checklist.",
    "What would change if I were on a tight budget?", "How would you explain that to my grandmother?",
    "Thanks! Can you summarise it in one sentence?", "What's a good first step I can take today?",
    "Are there any downsides?", "Can you say that in a more formal way?", "Write it as a short poem instead.",
    "Give me three follow-up questions I should think about.", "What do experts disagree about here?",
]
