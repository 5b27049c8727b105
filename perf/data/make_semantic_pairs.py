"""Writes perf/data/semantic_pairs.jsonl: the prompt pairs the semantic cache's threshold is set on.

Two labels (perf/lab/studies/semantic_cache.py reads them):
- `paraphrase`: the same request in other words (synonyms, reordering, formal / informal, typos, with or
  without "please", a question vs an imperative, odd Unicode): one answer serves both; a cache hit is right.
- `near_miss`: mostly the same words, a different request (negation, an opposite, another entity, two
  entities swapped, another number / unit / date, another language asked for): a cache hit is a wrong answer.

Hand-written pairs, plus a few template families (currency and unit swaps, flights, translations,
programming languages, pros vs cons). Each near miss was checked to need a different answer (no
"15% of 80" vs "80% of 15"). Deterministic: no randomness except a seeded typo generator.

    .venv/bin/python perf/data/make_semantic_pairs.py    # rewrites perf/data/semantic_pairs.jsonl
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).with_name("semantic_pairs.jsonl")

# One pair per line: "a | b" (paraphrases), "a | b | kind" (near misses). No "|" inside a prompt.
PARAPHRASES = {
    "coding": """
How do I reverse a list in Python? | What's the way to reverse a Python list?
Write a function that checks whether a string is a palindrome in JavaScript. | Can you please write me a JavaScript function to test if a string is a palindrome?
Explain the difference between a process and a thread. | What is the difference between threads and processes?
How can I undo my last git commit but keep the changes? | Undo the most recent git commit without losing my changes.
Why does my Python code raise "IndexError: list index out of range"? | What causes the Python error IndexError: list index out of range?
Sort a dictionary by its values in Python. | How do you sort a Python dict by value?
What does the yield keyword do in Python? | Explain Python's yield keyword.
How do I center a div horizontally and vertically with CSS? | CSS: center a div both vertically and horizontally
Give me a SQL query that returns the second highest salary from an Employees table. | Write SQL to find the second-largest salary in the Employees table.
How to read a file line by line in Go? | In Go, what's the way to read a file one line at a time?
What is a race condition? | Can you explain what a race condition is?
Convert a string to an integer in Java. | How do I parse a String into an int in Java?
How do I delete a remote branch in git? | git: remove a branch on the remote
Please explain Big O notation in simple terms. | explain big-O notation simply
What is the difference between == and === in JavaScript? | In JavaScript, how does === differ from ==?
How do I install a specific version of a package with pip? | pip: install a particular version of a package
Write a regular expression that matches an email address. | Regex to match email addresses please
How do I make an HTTP GET request in Python with the requests library? | Using requests, how do I send a GET request in Python?
What's the time complexity of binary search? | Binary search: what is its time complexity?
How do I list all files in a directory recursively in bash? | Recursively list every file in a folder from a bash shell.
Why is my React component rendering twice? | My React component renders two times, why?
How do I merge two dictionaries in Python 3? | Python 3: combine two dicts into one
Explain what a closure is in JavaScript. | What are closures in JS?
How do I check which version of Node.js is installed? | Command to see my installed Node.js version?
What is the difference between an abstract class and an interface in Java? | Java: interface vs abstract class, what's the difference?
How do I exit Vim? | How can I quit the Vim editor?
""",
    "support": """
How do I reset my password? | I forgot my password, how can I reset it?
I want to cancel my subscription. | Please cancel my subscription.
Where is my order? It hasn't arrived yet. | My order still hasn't shown up, where is it?
How can I change the email address on my account? | Update the email on my account, please.
Can I get a refund for a damaged item? | The item arrived damaged. Am I eligible for a refund?
The app keeps crashing when I open it. | Every time I launch the app it crashes.
How do I turn on two-factor authentication? | Enable 2FA on my account: how?
what r ur customer service hours | What are your customer service hours?
How do I delete my account permanently? | I'd like to permanently delete my account; how do I do that?
I was charged twice for the same order. | My card got billed two times for one order.
How do I update my billing address? | Change the billing address on file, please.
Can I change my delivery address after placing an order? | Is it possible to modify the shipping address once the order is placed?
How long does a refund take to process? | How many days until I get my refund?
Do you ship internationally? | Can you deliver to other countries?
My promo code isn't working. | The discount code I entered won't apply.
I can't log in to my account. | I'm unable to sign in to my account.
How do I return an item? | What's the process for returning a product?
Can I pause my membership instead of cancelling it? | Instead of cancelling my membership, is pausing it an option?
Please send me a new verification email. | I need the verification email resent.
hi, my package says delivered but i never got it | Tracking shows my parcel as delivered, but I didn't receive it.
How do I contact a human agent? | Can I speak to a real person?
Where can I download my invoice? | How do I get my invoice as a download?
""",
    "travel": """
What documents do I need to travel from the US to Canada? | Which papers are required for a trip from the United States to Canada?
Find me a cheap flight from London to New York next Friday. | I need an inexpensive flight from London to New York for next Friday.
What is the best time of year to visit Japan? | When's the ideal season to go to Japan?
Do I need a visa to visit Thailand as a UK citizen? | As a British citizen, is a visa required for Thailand?
Recommend things to do in Lisbon for three days. | What should I do on a 3-day trip to Lisbon?
How much luggage can I bring on a Ryanair flight? | What's Ryanair's baggage allowance?
Is it safe to drink tap water in Mexico City? | Can you drink the tap water in Mexico City safely?
what's the cheapest way to get around paris | What is the most affordable way to travel around Paris?
How early should I arrive at the airport for an international flight? | For an international flight, how far ahead should I get to the airport?
Can I bring a power bank in my carry-on? | Are power banks allowed in hand luggage?
Suggest a 7-day itinerary for Italy. | Plan a one-week trip through Italy for me.
What currency do they use in Switzerland? | Which currency is used in Switzerland?
Do I need travel insurance for a trip to Europe? | Is travel insurance necessary when visiting Europe?
What's the time difference between New York and Tokyo? | How many hours ahead of New York is Tokyo?
Pack list for a week of hiking in Scotland please | What should I pack for a one-week hiking trip in Scotland?
How do I avoid jet lag? | Tips to prevent jet lag?
Is Uber available in Istanbul? | Can I use Uber in Istanbul?
Which terminal does Lufthansa use at JFK? | At JFK, what terminal is Lufthansa in?
Is the Eiffel Tower open on Mondays? | Can you visit the Eiffel Tower on a Monday?
How do I get from Heathrow to central London? | What's the best way from Heathrow airport into central London?
""",
    "cooking": """
How long should I boil an egg for a soft yolk? | For a runny yolk, how many minutes do I boil an egg?
Give me a simple recipe for banana bread. | Easy banana bread recipe please.
What can I substitute for buttermilk? | What's a good replacement for buttermilk in a recipe?
How do I cook rice in a pot without a rice cooker? | Cooking rice on the stove with no rice cooker: how?
What temperature should I bake chicken breasts at? | At what oven temperature do I bake chicken breasts?
how do i make pancakes fluffy | How can I make my pancakes fluffier?
Why did my bread not rise? | My bread didn't rise. What went wrong?
How do I sharpen a kitchen knife? | What's the right way to sharpen a kitchen knife?
What's a good vegetarian dinner for four people? | Suggest a meatless dinner that serves four.
How long does cooked chicken last in the fridge? | How many days can I keep cooked chicken refrigerated?
Can I freeze fresh basil? | Is it possible to freeze fresh basil?
How do I caramelize onions? | What's the method for caramelizing onions?
What wine goes well with salmon? | Which wine should I pair with salmon?
How do I make a roux? | Explain how to make a roux.
Is it safe to eat raw cookie dough? | Can you safely eat raw cookie dough?
How do I keep a cut avocado from turning brown? | How to stop a cut avocado from browning?
Recipe for a classic Margherita pizza, please. | How do I make a traditional Margherita pizza?
How much salt should I put in pasta water? | How salty should pasta water be?
What's the difference between baking soda and baking powder? | Baking powder vs baking soda: how are they different?
How do I cook a steak medium-rare in a pan? | Pan-sear a steak to medium-rare: how?
""",
    "health": """
What are the symptoms of dehydration? | What are the signs that someone is dehydrated?
How much water should I drink a day? | What's the recommended daily water intake?
Is it okay to take ibuprofen on an empty stomach? | Can I take ibuprofen without eating first?
What are common side effects of the flu vaccine? | Flu shot: what side effects are typical?
How many hours of sleep does an adult need? | How much sleep do grown-ups need each night?
How can I lower my blood pressure naturally? | Natural ways to reduce blood pressure?
what helps w a sore throat | What helps with a sore throat?
How do I know if a cut needs stitches? | When does a cut require stitches?
What are good stretches for lower back pain? | Suggest stretches that help lower back pain.
Is it bad to crack your knuckles? | Does cracking your knuckles cause harm?
How long is the flu contagious? | For how long can someone with the flu spread it?
What foods are high in iron? | Which foods contain a lot of iron?
How do I treat a minor burn at home? | Home treatment for a small burn?
What is a normal resting heart rate for an adult? | What's a healthy resting pulse for adults?
Can stress cause headaches? | Is it possible for stress to give you headaches?
How often should I replace my toothbrush? | How frequently do I need a new toothbrush?
What are the early signs of diabetes? | Early warning signs of diabetes?
Is coffee bad for you? | Is drinking coffee unhealthy?
What should I do if I get stung by a bee? | Bee sting: what should I do?
""",
    "finance": """
What is compound interest? | Explain compound interest.
How do I start investing with little money? | Ways to begin investing when I don't have much cash?
Should I pay off debt or invest first? | Is it better to invest or to pay down debt first?
What is the difference between a Roth IRA and a traditional IRA? | Traditional IRA vs Roth IRA: what's the difference?
How is a credit score calculated? | Explain how credit scores are calculated.
What's an index fund? | Can you explain what an index fund is?
how much shud i save for emergencys | How much should I save for emergencies?
How do I create a monthly budget? | Help me make a budget for each month.
What is an ETF? | Define ETF.
What does APR mean on a credit card? | Credit card APR: what is it?
Is it better to buy a house or rent? | Should I rent or buy a home?
How are capital gains taxed in the US? | What's the US tax treatment of capital gains?
What is dollar-cost averaging? | Explain dollar cost averaging.
How can I improve my credit score quickly? | Fast ways to raise my credit score?
What is inflation and why does it matter? | Why does inflation matter, and what is it?
What's the 50/30/20 budgeting rule? | Explain the 50-30-20 rule for budgets.
How do stock dividends work? | Explain how dividends on stocks work.
How much of my income should I save for retirement? | What percentage of my salary should go to retirement savings?
Can you explain what a bond yield is? | What does bond yield mean?
What happens if I miss a credit card payment? | Consequences of missing a credit card payment?
""",
    "math": """
What is 15% of 80? | Calculate fifteen percent of 80.
Solve 2x + 3 = 11. | Find x if 2x + 3 = 11.
What is the derivative of sin(x)? | Differentiate sin x.
What is the square root of 144? | √144 = ?
How do I find the area of a circle? | What's the formula for a circle's area?
Is 97 a prime number? | Is the number 97 prime?
What is 7 times 8? | Multiply 7 by 8.
Explain the Pythagorean theorem. | What does the Pythagorean theorem say?
Convert 0.75 to a fraction. | What is 0.75 as a fraction?
What's the integral of x^2? | Integrate x squared.
What is the least common multiple of 4 and 6? | LCM of 6 and 4?
What is 2 to the power of 10? | 2^10 equals what?
What do the angles of a triangle add up to? | What is the sum of the interior angles of a triangle?
Simplify 12/18. | Reduce the fraction 12/18 to lowest terms.
what's the probabilty of rolling a 6 on a die | What is the probability of rolling a six on a die?
Average of 4, 8 and 15? | What is the mean of 4, 8, and 15?
What is 25 plus 17? | What is 17 + 25?
Explain what a logarithm is. | What's a logarithm?
How many seconds are in a day? | A day has how many seconds?
Solve the quadratic x^2 - 5x + 6 = 0. | Find the roots of x² − 5x + 6 = 0.
""",
    "trivia": """
Who wrote Pride and Prejudice? | Who is the author of Pride and Prejudice?
What is the capital of Australia? | Australia's capital city is what?
When did World War II end? | In what year did WWII end?
How tall is Mount Everest? | What's the height of Mt. Everest?
Who painted the Mona Lisa? | The Mona Lisa was painted by whom?
What is the largest planet in the solar system? | Which planet in our solar system is the biggest?
how many bones r in the human body | How many bones are in the human body?
Who was the first person to walk on the moon? | Name the first man on the moon.
What's the chemical symbol for gold? | Gold's chemical symbol?
Which country has the largest population? | What is the most populous country?
What language is spoken in Brazil? | What do people in Brazil speak?
Who discovered penicillin? | Penicillin was discovered by who?
What is the longest river in the world? | Which river is the world's longest?
How many players are on a soccer team? | How many players does a football (soccer) team field?
What year did the Titanic sink? | When did the Titanic go down?
Who invented the telephone? | Who is credited with inventing the telephone?
What is the boiling point of water in Celsius? | At how many degrees Celsius does water boil?
What is the speed of light? | How fast does light travel?
Who composed The Four Seasons? | The Four Seasons: which composer wrote it?
What's the smallest country in the world? | Which country is the tiniest in the world?
""",
    "writing": """
Write a short poem about the ocean. | Compose a brief poem about the sea.
Can you proofread this sentence: "Their going to the park tomorow." | Please check this sentence for errors: "Their going to the park tomorow."
Write a polite email declining a job offer. | Draft a courteous email turning down a job offer.
Summarize the plot of Hamlet in three sentences. | Give me a three-sentence summary of Hamlet's plot.
Give me five synonyms for "happy". | List 5 words that mean happy.
Write a cover letter for a junior data analyst position. | Draft a cover letter applying for a junior data analyst role.
Suggest a title for a blog post about remote work. | What's a good headline for a blog article on working remotely?
Rewrite this sentence in the passive voice: "The cat chased the mouse." | Put "The cat chased the mouse." into passive voice.
write me a haiku abt autumn | Write a haiku about autumn.
Write a thank-you note to my coworker for helping me move. | Draft a thank-you message to a colleague who helped me move house.
How do I write a strong thesis statement? | Tips for writing a good thesis statement?
Give me a tagline for a coffee shop. | Come up with a slogan for a café.
Make this sentence shorter: "In my personal opinion, I think that we should probably start the meeting at this point in time." | Shorten this: "In my personal opinion, I think that we should probably start the meeting at this point in time."
Write a limerick about a cat. | Compose a limerick featuring a cat.
What's the difference between "affect" and "effect"? | Affect vs effect: when do I use each?
Write a LinkedIn summary for a software engineer. | Draft a LinkedIn About section for a software engineer.
Write a bedtime story about a brave little turtle. | Tell me a bedtime story about a courageous small turtle.
When should I use a semicolon? | How do you use semicolons correctly?
Write an apology email to a customer for a late delivery. | Draft an email apologizing to a customer because their delivery was late.
Write a toast for my sister's wedding. | Help me write a wedding toast for my sister.
""",
}

# Same intent in another language (both prompts in that language), or with odd Unicode.
NON_ENGLISH_PARAPHRASES = {
    "trivia": """
¿Cuál es la capital de Australia? | ¿Qué ciudad es la capital de Australia?
Сколько костей в теле человека? | Сколько в человеческом теле костей?
富士山の高さは？ | 富士山は何メートルですか？
Wer hat die Relativitätstheorie entwickelt? | Von wem stammt die Relativitätstheorie?
""",
    "support": """
Comment réinitialiser mon mot de passe ? | J'ai oublié mon mot de passe, comment le réinitialiser ?
Como faço para cancelar minha assinatura? | Quero cancelar minha assinatura, como faço?
""",
    "coding": """
如何在Python中反转列表？ | Python里怎么把列表反转？
Wie lese ich eine Datei Zeile für Zeile in Python? | Python: eine Datei zeilenweise lesen, wie geht das?
""",
    "cooking": """
Dame una receta fácil de tortilla de patatas. | ¿Cómo hago una tortilla de patatas sencilla?
""",
    "travel": """
Quanto costa un biglietto del treno da Roma a Milano? | Qual è il prezzo di un biglietto del treno da Roma a Milano?
Wie spät ist es jetzt in Tokio? | Welche Uhrzeit ist es gerade in Tokio?
""",
}
UNICODE_PARAPHRASES = {
    "trivia": """
What’s the capital of Perú? | What is the capital of Peru?
""",
    "cooking": """
🍕 recipe for pizza dough pls | Give me a pizza dough recipe, please.
Is café au lait the same as a latte? | Is cafe au lait the same as a latte?
""",
    "support": """
Ｈｏｗ ｄｏ Ｉ ｒｅｓｅｔ ｍｙ ｐａｓｓｗｏｒｄ？ | How do I reset my password?
HOW DO I CANCEL MY ORDER?!?! | how do i cancel my order
""",
    "math": """
Convert 5 km → miles | How many miles is 5 km?
x² + y² = r²: what shape is this? | What shape does the equation x^2 + y^2 = r^2 describe?
What is ½ + ¼? | What is 1/2 + 1/4?
""",
    "coding": """
How do I reverse a list in Python?\u200b | How do I reverse a list in Python?
what does  “git  stash”  do | What does git stash do?
""",
    "travel": """
✈️ Lisbon → Porto: train or bus? | Should I take the train or the bus from Lisbon to Porto?
""",
}

# Requests with and without politeness / framing: "please", "can you", "hey", "thanks".
POLITE_BASES = [
    ("coding", "write a Python function that returns the n-th Fibonacci number"),
    ("coding", "explain what a Docker container is"),
    ("support", "tell me how to change my shipping address"),
    ("support", "help me recover my account"),
    ("travel", "suggest a day trip from Madrid"),
    ("travel", "tell me what to see in Prague in one day"),
    ("cooking", "give me a recipe for guacamole"),
    ("cooking", "tell me how long to roast potatoes at 200°C"),
    ("health", "explain what cholesterol is"),
    ("health", "list the symptoms of iron deficiency"),
    ("finance", "explain what a Roth IRA is"),
    ("finance", "tell me how a mortgage works"),
    ("math", "explain how to compute a standard deviation"),
    ("trivia", "tell me who discovered gravity"),
    ("writing", "write a birthday message for my grandmother"),
    ("writing", "suggest a name for a bakery"),
]
POLITE_FORMS = [
    lambda s: (s[0].upper() + s[1:] + ".", "Please " + s + "."),
    lambda s: ("Could you " + s + "?", s[0].upper() + s[1:] + ", thanks."),
    lambda s: ("Hey, can you " + s + "?", "I would like you to " + s + ", please."),
]

# Questions with realistic typos (keyboard neighbours, dropped and doubled letters), made by a seeded generator.
TYPO_BASES = [
    ("coding", "How do I convert a string to lowercase in JavaScript?"),
    ("coding", "What is the difference between a list and a tuple in Python?"),
    ("coding", "How do I rename a column in a pandas DataFrame?"),
    ("support", "How do I change the language of the app?"),
    ("support", "Why was my payment declined?"),
    ("travel", "What is the best way to get from Rome to Florence?"),
    ("travel", "Do I need a power adapter in Australia?"),
    ("cooking", "How long do I cook spaghetti for al dente?"),
    ("cooking", "What can I use instead of eggs in a cake?"),
    ("health", "What are the symptoms of a vitamin B12 deficiency?"),
    ("health", "How long does a common cold usually last?"),
    ("finance", "What is the difference between a stock and a bond?"),
    ("finance", "How do I check my credit report for free?"),
    ("math", "How do I calculate the volume of a cylinder?"),
    ("trivia", "Who was the first woman to win a Nobel Prize?"),
    ("trivia", "What is the tallest building in the world?"),
    ("writing", "How do I write a good opening line for a novel?"),
    ("writing", "What is the difference between a simile and a metaphor?"),
]
# A letter's right-hand neighbour on a QWERTY row (the last key's left-hand one).
KEYBOARD = {row[i]: row[i + 1] if i + 1 < len(row) else row[i - 1]
            for row in ("qwertyuiop", "asdfghjkl", "zxcvbnm") for i in range(len(row))}

NEAR_MISSES = {
    "coding": """
How do I reverse a list in Python? | How do I sort a list in Python? | operation
How can I undo my last git commit but keep the changes? | How can I undo my last git commit and discard the changes? | negation
Convert a string to an integer in Java. | Convert an integer to a string in Java. | swap
How do I delete a remote branch in git? | How do I delete a local branch in git? | entity
Sort a dictionary by its values in Python. | Sort a dictionary by its keys in Python. | entity
Give me a SQL query that returns the second highest salary from an Employees table. | Give me a SQL query that returns the second lowest salary from an Employees table. | opposite
What's the time complexity of binary search? | What's the time complexity of linear search? | entity
What's the worst-case time complexity of quicksort? | What's the best-case time complexity of quicksort? | opposite
How do I convert a list to a set in Python? | How do I convert a set to a list in Python? | swap
Why is my React component rendering twice? | Why is my React component not rendering at all? | negation
How do I make an HTTP GET request in Python? | How do I make an HTTP POST request in Python? | entity
How do I remove duplicates from a list in Python? | How do I find the duplicates in a list in Python? | operation
How do I read a JSON file in Python? | How do I write a JSON file in Python? | opposite
How do I check if a key exists in a Python dictionary? | How do I check if a value exists in a Python dictionary? | entity
How do I make a column NOT NULL in PostgreSQL? | How do I make a column nullable in PostgreSQL? | negation
How do I install Node.js on Ubuntu? | How do I uninstall Node.js on Ubuntu? | opposite
How do I increase the font size in VS Code? | How do I decrease the font size in VS Code? | opposite
How do I convert a timestamp to a date in JavaScript? | How do I convert a date to a timestamp in JavaScript? | swap
What port does HTTPS use by default? | What port does SSH use by default? | entity
How do I add a column to a table in MySQL? | How do I drop a column from a table in MySQL? | opposite
How do I get the first element of an array in JavaScript? | How do I get the last element of an array in JavaScript? | opposite
How do I enable CORS in Express? | How do I disable CORS in Express? | opposite
What is the default branch name in a new git repository? | How do I change the default branch name in a new git repository? | aspect
Round a float to 2 decimal places in Python. | Round a float to 4 decimal places in Python. | number
How do I split a string by commas in Python? | How do I join a list of strings with commas in Python? | opposite
How do I run a Docker container as root? | How do I run a Docker container as a non-root user? | negation
""",
    "support": """
How do I reset my password? | How do I reset my PIN? | entity
I want to cancel my subscription. | I want to renew my subscription. | opposite
How do I turn on two-factor authentication? | How do I turn off two-factor authentication? | opposite
How do I delete my account permanently? | How do I deactivate my account temporarily? | opposite
I was charged twice for the same order. | I was not charged for my order. | negation
Do you ship to Canada? | Do you ship to Australia? | entity
How long does a refund take to process? | How long does an exchange take to process? | entity
My promo code isn't working. | My gift card isn't working. | entity
The app keeps crashing on my iPhone. | The app keeps crashing on my Android phone. | entity
How do I upgrade my plan to Premium? | How do I downgrade my plan from Premium? | opposite
I want to add a user to my team account. | I want to remove a user from my team account. | opposite
Why was my order cancelled? | Why was my order delayed? | entity
Can I return an item after 30 days? | Can I return an item after 90 days? | number
How do I unsubscribe from marketing emails? | How do I subscribe to marketing emails? | opposite
I'd like to change my order from size M to size L. | I'd like to change my order from size L to size M. | swap
How do I export my contacts? | How do I import my contacts? | opposite
Can I get a refund for a digital purchase? | Can I get a refund for a physical purchase? | entity
I'm being charged in euros instead of dollars. | I'm being charged in dollars instead of euros. | swap
How do I update my billing address? | How do I update my shipping address? | entity
My order arrived without the charger. | My order arrived with the wrong charger. | negation
Why can't I see my order history? | Why can't I see my payment history? | entity
How do I make my profile private? | How do I make my profile public? | opposite
Which payment methods do you accept? | Which payment methods do you not accept? | negation
""",
    "travel": """
Do I need a visa to visit Thailand as a UK citizen? | Do I need a visa to visit Thailand as an Indian citizen? | entity
What is the best time of year to visit Japan? | What is the worst time of year to visit Japan? | opposite
Is it safe to drink tap water in Mexico City? | Is it safe to drink tap water in Copenhagen? | entity
How much luggage can I bring on a Ryanair flight? | How much luggage can I bring on an Emirates flight? | entity
Can I bring a power bank in my carry-on? | Can I bring a power bank in my checked luggage? | entity
What's the time difference between New York and Tokyo? | What's the time difference between New York and London? | entity
Is the Eiffel Tower open on Mondays? | Is the Louvre open on Mondays? | entity
What is the cheapest way to get around Paris? | What is the fastest way to get around Paris? | attribute
Find a hotel near the beach in Barcelona under 100 euros a night. | Find a hotel near the beach in Barcelona under 300 euros a night. | number
Book a hotel room for 2 adults from June 3 to June 5. | Book a hotel room for 2 adults from June 5 to June 8. | number
How early should I arrive at the airport for an international flight? | How early should I arrive at the airport for a domestic flight? | entity
Can I cancel my train ticket for a refund? | Can I change my train ticket for free? | operation
What vaccinations do I need for Kenya? | What vaccinations do I need for Peru? | entity
Is it warm in Sydney in December? | Is it warm in Sydney in July? | number
Recommend things to do in Lisbon in winter. | Recommend things to do in Lisbon in summer. | entity
Which countries require a visa for US citizens? | Which countries don't require a visa for US citizens? | negation
Is it easy to find vegetarian food in Tokyo? | Is it easy to find halal food in Tokyo? | entity
How do I get from Heathrow to central London? | How do I get from Gatwick to central London? | entity
What is the speed limit on German motorways? | What is the speed limit on French motorways? | entity
Suggest a 7-day itinerary for Italy. | Suggest a 14-day itinerary for Italy. | number
Which side of the road do they drive on in Japan? | Which side of the road do they drive on in South Korea? | entity
Which European countries use the euro? | Which European countries don't use the euro? | negation
""",
    "cooking": """
How long should I boil an egg for a soft yolk? | How long should I boil an egg for a hard yolk? | opposite
Give me a simple recipe for banana bread. | Give me a simple recipe for zucchini bread. | entity
What can I substitute for buttermilk? | What can I substitute for butter? | entity
How long should I bake chicken breasts at 400°F? | How long should I bake chicken breasts at 325°F? | number
How long does cooked chicken last in the fridge? | How long does cooked chicken last in the freezer? | entity
Can I freeze fresh basil? | Can I freeze fresh lettuce? | entity
What wine goes well with salmon? | What wine goes well with steak? | entity
Is it safe to eat raw salmon? | Is it safe to eat raw chicken? | entity
How do I cook a steak medium-rare in a pan? | How do I cook a steak well-done in a pan? | opposite
Suggest a vegetarian dinner for four. | Suggest a vegetarian dessert for four. | entity
How do I make my pancakes fluffy? | How do I make my pancakes crispy? | attribute
Give me a recipe for chewy chocolate chip cookies. | Give me a recipe for crunchy chocolate chip cookies. | attribute
How many cups is 200 grams of flour? | How many cups is 200 grams of sugar? | entity
How many tablespoons are in a cup? | How many teaspoons are in a cup? | entity
Can I use olive oil for deep frying? | Can I use olive oil for baking? | entity
How long do I roast a 5 kg turkey? | How long do I roast a 9 kg turkey? | number
How do I make pizza dough without yeast? | How do I make pizza dough with yeast? | negation
What is the smoke point of olive oil? | What is the smoke point of avocado oil? | entity
How do I thicken a soup? | How do I thin a soup? | opposite
Should I rinse rice before cooking it? | Should I rinse pasta before cooking it? | entity
How do I make bread dough rise faster? | How do I make bread dough rise slower? | opposite
What's a good side dish for pork chops? | What's a good sauce for pork chops? | entity
Which cheeses are made with animal rennet? | Which cheeses are made without animal rennet? | negation
""",
    "health": """
Is it okay to take ibuprofen on an empty stomach? | Is it okay to take ibuprofen with alcohol? | entity
Is it safe to take ibuprofen while pregnant? | Is it safe to take acetaminophen while pregnant? | entity
How many hours of sleep does an adult need? | How many hours of sleep does a newborn need? | entity
How can I lower my blood pressure naturally? | How can I raise my blood pressure naturally? | opposite
What foods are high in iron? | What foods are high in potassium? | entity
What is a normal resting heart rate for an adult? | What is a normal resting heart rate for a newborn? | entity
How long is the flu contagious? | How long is chickenpox contagious? | entity
What are the symptoms of low blood sugar? | What are the symptoms of high blood sugar? | opposite
Should I put ice on a fresh sprain? | Should I put heat on a fresh sprain? | entity
How much vitamin D should I take daily? | How much vitamin C should I take daily? | entity
Can I exercise with a fever? | Can I exercise with a cold? | entity
How many calories are in a banana? | How many calories are in an avocado? | entity
What's the maximum daily dose of acetaminophen? | What's the maximum daily dose of ibuprofen? | entity
Can I drink alcohol while taking antibiotics? | Can I drink coffee while taking antibiotics? | entity
Can children take aspirin? | Can adults take aspirin? | entity
How do I treat a minor burn at home? | How do I treat a severe burn? | opposite
Which foods should I eat with high cholesterol? | Which foods should I avoid with high cholesterol? | opposite
How can I gain weight healthily? | How can I lose weight healthily? | opposite
What are the symptoms of a heart attack? | What are the symptoms of a stroke? | entity
Is it normal to have a fever after the flu shot? | Is it normal to have a rash after the flu shot? | entity
How long after eating should I wait to swim? | How long after eating should I wait to run? | entity
Which painkillers can I take with warfarin? | Which painkillers must I not take with warfarin? | negation
""",
    "finance": """
What is the difference between a Roth IRA and a traditional IRA? | What is the difference between a Roth IRA and a Roth 401(k)? | entity
How are capital gains taxed in the US? | How are capital gains taxed in the UK? | entity
How are short-term capital gains taxed? | How are long-term capital gains taxed? | opposite
What happens if I miss a credit card payment? | What happens if I miss a mortgage payment? | entity
How do I increase my credit limit? | How do I decrease my credit limit? | opposite
What was Apple's revenue in 2022? | What was Apple's revenue in 2023? | number
What is the monthly payment on a $300,000 mortgage at 6% over 30 years? | What is the monthly payment on a $300,000 mortgage at 7% over 30 years? | number
What is the monthly payment on a $300,000 mortgage at 6% over 30 years? | What is the monthly payment on a $300,000 mortgage at 6% over 15 years? | number
What is a bull market? | What is a bear market? | opposite
Should I buy bonds when interest rates rise? | Should I buy bonds when interest rates fall? | opposite
How much income tax do I pay on a $50,000 salary in California? | How much income tax do I pay on a $50,000 salary in Texas? | entity
How do I open a savings account? | How do I close a savings account? | opposite
Is gold a good hedge against inflation? | Is bitcoin a good hedge against inflation? | entity
What is the Roth IRA contribution limit for 2023? | What is the Roth IRA contribution limit for 2024? | number
What is the penalty for withdrawing from a 401(k) before age 59½? | What is the penalty for withdrawing from a 401(k) after age 59½? | opposite
How much will $10,000 grow in 10 years at 5% interest? | How much will $10,000 grow in 20 years at 5% interest? | number
Is it better to pay off my car loan early? | Is it better to pay off my student loan early? | entity
What credit score do I need to buy a house? | What credit score do I need to rent an apartment? | entity
How do I transfer money from PayPal to my bank? | How do I transfer money from my bank to PayPal? | swap
What is the current federal funds rate? | What is the current prime rate? | entity
Which expenses are tax deductible for freelancers? | Which expenses are not tax deductible for freelancers? | negation
""",
    "math": """
What is 15% of 80? | What is 15% of 90? | number
Solve 2x + 3 = 11. | Solve 2x - 3 = 11. | number
What is the derivative of sin(x)? | What is the derivative of cos(x)? | entity
What is the square root of 144? | What is the square root of 169? | number
How do I find the area of a circle? | How do I find the circumference of a circle? | attribute
Is 97 a prime number? | Is 91 a prime number? | number
What is 7 times 8? | What is 7 plus 8? | operation
What's the integral of x^2? | What's the integral of x^3? | number
What is the least common multiple of 4 and 6? | What is the greatest common divisor of 4 and 6? | operation
What is 2 to the power of 10? | What is 10 to the power of 2? | swap
What do the angles of a triangle add up to? | What do the angles of a pentagon add up to? | entity
What is the probability of rolling a 6 on a die? | What is the probability of rolling two 6s with two dice? | number
What is 100 divided by 4? | What is 4 divided by 100? | swap
What is the mean of 4, 8 and 15? | What is the median of 4, 8 and 15? | operation
What is the volume of a sphere with radius 2? | What is the surface area of a sphere with radius 2? | attribute
Convert 0.75 to a fraction. | Convert 0.75 to a percentage. | entity
How many seconds are in a day? | How many seconds are in a week? | entity
What is 12 minus 5? | What is 5 minus 12? | swap
Is 0 an even number? | Is 0 a positive number? | attribute
What is the factorial of 5? | What is the factorial of 6? | number
What is 3/4 + 1/8? | What is 3/4 - 1/8? | operation
What is the sum of the first 100 positive integers? | What is the sum of the first 100 odd integers? | entity
What is the slope of the line through (1, 2) and (3, 8)? | What is the slope of the line through (1, 2) and (3, 6)? | number
How many ways can 5 people sit in a row? | How many ways can 5 people sit around a round table? | entity
Give an example of a function that is continuous but not differentiable. | Give an example of a function that is differentiable but not continuous. | swap
""",
    "trivia": """
Who wrote Pride and Prejudice? | When was Pride and Prejudice published? | aspect
What is the capital of Australia? | What is the capital of Austria? | entity
When did World War II end? | When did World War II start? | opposite
How tall is Mount Everest? | How tall is K2? | entity
Who painted the Mona Lisa? | Where is the Mona Lisa displayed? | aspect
What is the largest planet in the solar system? | What is the smallest planet in the solar system? | opposite
Who was the first person to walk on the moon? | Who was the second person to walk on the moon? | number
What's the chemical symbol for gold? | What's the chemical symbol for silver? | entity
Which country has the largest population? | Which country has the largest area? | attribute
What is the longest river in the world? | What is the longest river in Europe? | entity
What is the boiling point of water in Celsius? | What is the boiling point of water in Fahrenheit? | entity
Who invented the telephone? | Who invented the television? | entity
What year did the Titanic sink? | How many people died when the Titanic sank? | aspect
What is the speed of light? | What is the speed of sound? | entity
Who was the first president of the United States? | Who was the third president of the United States? | number
Which planet is closest to the sun? | Which planet is farthest from the sun? | opposite
How many players are on a soccer team? | How many players are on a basketball team? | entity
What is the freezing point of water? | What is the freezing point of seawater? | entity
Which is the largest ocean on Earth? | Which is the smallest ocean on Earth? | opposite
Who won the FIFA World Cup in 2018? | Who won the FIFA World Cup in 2014? | number
How many moons does Mars have? | How many moons does Jupiter have? | entity
What is the capital of Canada? | What is the largest city in Canada? | attribute
Who was the Roman emperor when Jesus was born? | Who was the Roman emperor when Jesus died? | entity
In which city was Mozart born? | In which city did Mozart die? | opposite
Which planets in the solar system have rings? | Which planets in the solar system have no rings? | negation
""",
    "writing": """
Write a short poem about the ocean. | Write a short poem about the desert. | entity
Write a polite email declining a job offer. | Write a polite email accepting a job offer. | opposite
Summarize the plot of Hamlet in three sentences. | Summarize the plot of Macbeth in three sentences. | entity
Give me five synonyms for "happy". | Give me five antonyms for "happy". | opposite
Write a cover letter for a data analyst position. | Write a resignation letter for my data analyst position. | entity
Rewrite this sentence in the past tense: "The cat chases the mouse." | Rewrite this sentence in the future tense: "The cat chases the mouse." | entity
Write a haiku about autumn. | Write a haiku about spring. | entity
Write a formal email to my landlord about a broken heater. | Write a casual text to my landlord about a broken heater. | attribute
Write a 100-word story about a dragon. | Write a 1000-word story about a dragon. | number
Write a limerick about a cat. | Write a sonnet about a cat. | entity
Write a toast for my sister's wedding. | Write a toast for my sister's birthday. | entity
Write a positive review of a restaurant. | Write a negative review of a restaurant. | opposite
Write a bedtime story for a 4-year-old. | Write a bedtime story for a 12-year-old. | number
Make this sentence shorter: "We will be holding a meeting on the subject of the budget next week." | Make this sentence longer: "We will be holding a meeting on the subject of the budget next week." | opposite
Write a tweet announcing our product launch. | Write a tweet announcing the delay of our product launch. | entity
Write a story in the first person about a lost dog. | Write a story in the third person about a lost dog. | attribute
Give me three arguments for school uniforms. | Give me three arguments against school uniforms. | opposite
Write a sad poem about leaving home. | Write a happy poem about leaving home. | opposite
Is "data" singular or plural? | Is "media" singular or plural? | entity
Write a product description for noise-cancelling headphones. | Write a product description for a wireless keyboard. | entity
Write a sentence that uses a semicolon correctly. | Write a sentence that uses a semicolon incorrectly. | negation
""",
}

NON_ENGLISH_NEAR_MISSES = {
    "travel": """
Wie spät ist es jetzt in Tokio? | Wie spät ist es jetzt in Toronto? | entity
Quanto costa un biglietto del treno da Roma a Milano? | Quanto costa un biglietto del treno da Roma a Napoli? | entity
""",
    "support": """
Comment activer l'authentification à deux facteurs ? | Comment désactiver l'authentification à deux facteurs ? | opposite
Quero cancelar minha assinatura. | Quero renovar minha assinatura. | opposite
""",
    "finance": """
Convierte 100 dólares a euros. | Convierte 100 euros a dólares. | swap
""",
    "trivia": """
富士山の高さは？ | エベレストの高さは？ | entity
Сколько костей в теле человека? | Сколько зубов у взрослого человека? | entity
""",
    "coding": """
如何在Python中反转列表？ | 如何在Python中排序列表？ | operation
""",
}
UNICODE_NEAR_MISSES = {
    "math": """
Convert 5 km → miles | Convert 5 miles → km | swap
Is 30 °C hot? | Is 30 °F hot? | entity
What is ½ + ¼? | What is ½ − ¼? | operation
""",
    "health": """
Can dogs eat chocolate 🍫? | Can dogs eat carrots 🥕? | entity
""",
    "travel": """
✈️ Lisbon → Porto: train or bus? | ✈️ Lisbon → Madrid: train or bus? | entity
""",
}
# The same question, the answer wanted in another language: a cached English answer is wrong for the other.
ANSWER_LANGUAGE_NEAR_MISSES = {
    "trivia": """
What is the capital of France? | Quelle est la capitale de la France ? | language
How many bones are in the human body? | ¿Cuántos huesos hay en el cuerpo humano? | language
""",
    "health": """
Explain how vaccines work, in English. | Explain how vaccines work, in German. | language
""",
    "coding": """
Explain recursion in simple terms. | Explain recursion in simple terms, in Spanish. | language
""",
    "writing": """
Write a short birthday message for my friend in English. | Write a short birthday message for my friend in Japanese. | language
""",
}

# Template families (near misses): two entities swapped, or one thing changed, in an otherwise identical prompt.
CURRENCIES = [("USD", "EUR", 100), ("GBP", "JPY", 50), ("EUR", "CHF", 250), ("CAD", "USD", 1000),
              ("INR", "USD", 5000), ("AUD", "NZD", 20), ("USD", "MXN", 75), ("SEK", "NOK", 300)]
UNIT_SWAPS = [
    ("math", "How many miles is 10 kilometers?", "How many kilometers is 10 miles?"),
    ("math", "Convert 30 degrees Celsius to Fahrenheit.", "Convert 30 degrees Fahrenheit to Celsius."),
    ("cooking", "How many grams are in 2 ounces?", "How many ounces are in 2 grams?"),
    ("math", "Convert 5 feet to meters.", "Convert 5 meters to feet."),
    ("cooking", "How many cups is 1 liter?", "How many liters is 1 cup?"),
    ("math", "Convert 3 hours to minutes.", "Convert 3 minutes to hours."),
]
NUMBER_CHANGES = [
    ("cooking", "How many grams are in 3 cups of flour?", "How many grams are in 4 cups of flour?"),
    ("math", "What is 18% of 250?", "What is 18% of 2500?"),
    ("health", "How many calories do I burn walking 5 km?", "How many calories do I burn walking 15 km?"),
    ("math", "What day of the week was July 4, 1976?", "What day of the week was July 4, 1977?"),
    ("trivia", "Who won the Super Bowl in 2020?", "Who won the Super Bowl in 2021?"),
    ("finance", "What is a 15% tip on $84?", "What is a 20% tip on $84?"),
    ("travel", "What public holidays are there in Germany in May?", "What public holidays are there in Germany in December?"),
    ("cooking", "Scale a recipe for 4 servings of risotto to 6 servings.", "Scale a recipe for 4 servings of risotto to 10 servings."),
]
FLIGHTS = [("London", "New York", "May 3"), ("Paris", "Rome", "June 12"), ("Tokyo", "Seoul", "March 8"),
           ("Berlin", "Madrid", "July 21"), ("Sydney", "Auckland", "October 2"), ("Chicago", "Denver", "April 15")]
TRANSLATIONS = [("Where is the train station?", "French", "German"),
                ("Thank you very much for your help.", "Spanish", "Italian"),
                ("I am allergic to peanuts.", "Japanese", "Korean"),
                ("How much does this cost?", "Portuguese", "Spanish"),
                ("Good morning, how are you?", "Russian", "Polish"),
                ("Can I have the bill, please?", "German", "Dutch"),
                ("Where is the nearest pharmacy?", "Italian", "French"),
                ("I don't understand.", "Mandarin Chinese", "Arabic")]
CODE_TASKS = [("Write a function that reverses a string in {}.", "Python", "JavaScript"),
              ("How do I read a file line by line in {}?", "Java", "C#"),
              ("Show me how to sort an array of integers in {}.", "Go", "Rust"),
              ("How do I start a new thread in {}?", "C++", "Java"),
              ("How do I parse JSON in {}?", "Ruby", "PHP"),
              ("Write a hello world program in {}.", "C", "Kotlin"),
              ("How do I declare a constant in {}?", "Swift", "TypeScript"),
              ("How do I handle exceptions in {}?", "Python", "Go")]
PROS_CONS = [("finance", "renting instead of buying a home"), ("travel", "travelling by train across Europe"),
             ("health", "intermittent fasting"), ("coding", "using microservices"),
             ("finance", "index funds"), ("cooking", "cooking with cast iron pans"),
             ("support", "the annual plan compared to the monthly plan"), ("writing", "self-publishing a novel"),
             ("health", "running every day"), ("coding", "TypeScript over JavaScript")]


def lines(block: str, fields: int) -> list[list[str]]:
    """The "a | b [| kind]" rows of a block, stripped; a row with the wrong number of fields is an error."""
    rows = []
    for line in block.strip().splitlines():
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) != fields or not all(parts):
            raise ValueError(f"expected {fields} fields: {line!r}")
        rows.append(parts)
    return rows


def typo(text: str, rng: random.Random, n: int = 2) -> str:
    """`text` with `n` typos at distinct letters of distinct words: a neighbouring key, a dropped or doubled letter."""
    chars = list(text)
    letters = [i for i, c in enumerate(chars) if c.isalpha() and c.islower()]
    for i in sorted(rng.sample(letters, n), reverse=True):
        kind = rng.choice(("neighbour", "drop", "double"))
        if kind == "neighbour":
            chars[i] = KEYBOARD.get(chars[i], chars[i])
        elif kind == "drop":
            del chars[i]
        else:
            chars.insert(i, chars[i])
    out = "".join(chars)
    return out[0].lower() + out[1:].rstrip("?")   # typed in a hurry: no capital, no question mark


def pairs() -> list[dict]:
    """Every pair, in a fixed order."""
    out = []

    def add(a: str, b: str, label: str, domain: str, kind: str) -> None:
        out.append({"a": a, "b": b, "label": label, "domain": domain, "kind": kind})

    for blocks, kind in ((PARAPHRASES, "rewording"), (NON_ENGLISH_PARAPHRASES, "non_english"),
                         (UNICODE_PARAPHRASES, "unicode")):
        for domain, block in blocks.items():
            for a, b in lines(block, 2):
                add(a, b, "paraphrase", domain, kind)
    for domain, base in POLITE_BASES:
        for form in POLITE_FORMS:
            a, b = form(base)
            add(a, b, "paraphrase", domain, "politeness")
    rng = random.Random(29)
    for domain, question in TYPO_BASES:
        add(question, typo(question, rng), "paraphrase", domain, "typo")

    for blocks in (NEAR_MISSES, NON_ENGLISH_NEAR_MISSES, UNICODE_NEAR_MISSES, ANSWER_LANGUAGE_NEAR_MISSES):
        for domain, block in blocks.items():
            for a, b, kind in lines(block, 3):
                add(a, b, "near_miss", domain, kind)
    for x, y, amount in CURRENCIES:
        add(f"Convert {amount} {x} to {y}.", f"Convert {amount} {y} to {x}.", "near_miss", "finance", "swap")
    for x, y, _ in CURRENCIES[:4]:
        add(f"What is the exchange rate from {x} to {y}?", f"What is the exchange rate from {y} to {x}?",
            "near_miss", "finance", "swap")
    for domain, a, b in UNIT_SWAPS:
        add(a, b, "near_miss", domain, "swap")
    for domain, a, b in NUMBER_CHANGES:
        add(a, b, "near_miss", domain, "number")
    for x, y, day in FLIGHTS:
        add(f"Find me a flight from {x} to {y} on {day}.", f"Find me a flight from {y} to {x} on {day}.",
            "near_miss", "travel", "swap")
    for x, y, day in FLIGHTS[:3]:
        add(f"Find me a flight from {x} to {y} on {day}.", f"Find me a flight from {x} to {y} on {day[:-1]}9.",
            "near_miss", "travel", "number")
    for text, x, y in TRANSLATIONS:
        add(f'Translate "{text}" into {x}.', f'Translate "{text}" into {y}.', "near_miss", "writing", "language")
    for task, x, y in CODE_TASKS:
        add(task.format(x), task.format(y), "near_miss", "coding", "language")
    for domain, topic in PROS_CONS:
        add(f"What are the pros of {topic}?", f"What are the cons of {topic}?", "near_miss", domain, "opposite")
    return out


def main() -> None:
    rows = pairs()
    seen = set()
    for r in rows:
        key = (r["a"], r["b"])
        if key in seen or r["a"] == r["b"]:
            raise ValueError(f"duplicate or identical pair: {key}")
        seen.add(key)
    with OUT.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts = {label: sum(r["label"] == label for r in rows) for label in ("paraphrase", "near_miss")}
    print(f"{OUT}: {len(rows)} pairs {counts}")


if __name__ == "__main__":
    main()
