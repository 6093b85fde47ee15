"""Word lists for the built-in benchmark's values (names, places, titles, categories)."""

FIRST_NAMES = (
    "Alice", "Bruno", "Chloe", "Daniel", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Keiko", "Liam",
    "Maria", "Nikolai", "Olivia", "Pedro", "Quentin", "Rosa", "Samir", "Tara", "Umar", "Vera", "Wen", "Xavier",
    "Yara", "Zoe", "Amara", "Boris", "Carmen", "Dmitri", "Emma", "Felix", "Greta", "Hana", "Ivan", "Julia",
)
LAST_NAMES = (
    "Anderson", "Bianchi", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Hansen", "Ito", "Jensen", "Kowalski",
    "Larsen", "Moreau", "Novak", "Okafor", "Petrov", "Quinn", "Rossi", "Silva", "Tanaka", "Ueda", "Vargas",
    "Weber", "Xu", "Yilmaz", "Zhang", "Alvarez", "Berg", "Chen", "Dias", "Evans", "Fontaine", "Gomez", "Haddad",
)
CITIES = (
    "Paris", "Berlin", "Madrid", "Lisbon", "Rome", "Vienna", "Prague", "Oslo", "Dublin", "Warsaw", "Athens",
    "Tokyo", "Seoul", "Lima", "Quito", "Cairo", "Nairobi", "Toronto", "Denver", "Boston", "Sydney", "Perth",
)
COUNTRIES = (
    "France", "Germany", "Spain", "Portugal", "Italy", "Austria", "Norway", "Ireland", "Poland", "Greece",
    "Japan", "Korea", "Peru", "Ecuador", "Egypt", "Kenya", "Canada", "Brazil", "Mexico", "Australia",
)
ADJECTIVES = (
    "Silent", "Golden", "Hidden", "Broken", "Crimson", "Distant", "Frozen", "Gentle", "Hollow", "Iron", "Lost",
    "Midnight", "Northern", "Paper", "Quiet", "Restless", "Secret", "Velvet", "Wild", "Bright", "Electric",
)
NOUNS = (
    "River", "Garden", "Mountain", "Harbor", "Window", "Forest", "Mirror", "Island", "Lantern", "Meadow", "Storm",
    "Bridge", "Compass", "Desert", "Engine", "Falcon", "Horizon", "Journey", "Kingdom", "Orchard", "Planet",
)
COMPANY_SUFFIXES = ("Group", "Works", "House", "Partners", "Industries", "Media", "Holdings", "Studio")
SUBJECTS = (
    "Physics", "Chemistry", "Biology", "History", "Mathematics", "Literature", "Economics", "Philosophy",
    "Geography", "Music", "Computer Science", "Art",
)
SEMESTERS = ("Fall", "Spring", "Summer", "Winter")
PRODUCT_CATEGORIES = ("Electronics", "Garden", "Kitchen", "Toys", "Sports", "Books", "Clothing", "Beauty")
GENRES = ("Fantasy", "Mystery", "Romance", "Science Fiction", "Biography", "History", "Poetry", "Thriller")
MUSIC_GENRES = ("Jazz", "Rock", "Pop", "Folk", "Blues", "Hip Hop", "Classical", "Electronic")
SPECIALTIES = ("Cardiology", "Neurology", "Pediatrics", "Oncology", "Dermatology", "Radiology", "Surgery")
BUILDINGS = ("North Wing", "South Wing", "East Tower", "West Tower", "Main Building", "Annex")
MANUFACTURERS = ("Boeing", "Airbus", "Embraer", "Bombardier", "ATR")
AIRCRAFT_MODELS = ("737", "747", "777", "787", "A320", "A330", "A350", "E190", "CRJ900", "ATR72")
MEMBERSHIP_LEVELS = ("Basic", "Silver", "Gold", "Platinum")
VENUE_KINDS = ("Hall", "Arena", "Theatre", "Club", "Stadium")
