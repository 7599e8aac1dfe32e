"""The question bank ``MiniLMDecider`` answers from by default, and example states.

Data only; re-exported by ``asyncache.demo.minilm``, where it is used. A
bank of your own is a sequence of ``Question`` passed as ``questions=``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EXAMPLE_STATES", "SUPPORT_QUESTIONS", "Question"]


@dataclass(frozen=True, slots=True)
class Question:
    """A yes/no question with example sentences for each answer.

    Args:
        id: the short name requests use (``"refund"``).
        text: the question in words, for people reading decisions.
        yes: sentences for which the answer is yes.
        no: sentences for which the answer is no; near misses work best.
    """

    id: str
    text: str
    yes: tuple[str, ...]
    no: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.yes or not self.no:
            raise ValueError(f"question {self.id!r} needs at least one yes and one no example")


# Everyday support messages that answer no to every question below.
_NEUTRAL = (
    "What time do you open on Saturdays?",
    "Do you have this jacket in a medium size?",
    "Can you tell me more about the features of the premium plan?",
    "I would like to update the email address on my profile.",
)

SUPPORT_QUESTIONS: tuple[Question, ...] = (
    Question(
        "refund",
        "Is the customer asking for a refund?",
        yes=(
            "I want my money back.",
            "Please refund my order.",
            "The product broke after two days, I want a refund.",
            "How do I return this item and get reimbursed?",
            "Can you credit the payment back to my card?",
            "It doesn't fit, I'd like to send it back for a refund.",
        ),
        no=(
            "I want to buy another one of these.",
            "The refund you sent arrived, thank you.",
            "Can I exchange this shirt for a larger size?",
            "My order never arrived.",
            *_NEUTRAL,
        ),
    ),
    Question(
        "cancel",
        "Does the customer want to cancel a subscription or an order?",
        yes=(
            "Please cancel my subscription.",
            "I want to cancel my order before it ships.",
            "Stop my membership, I don't want to be billed again.",
            "How do I close my account and end the plan?",
            "Unsubscribe me from the monthly box.",
        ),
        no=(
            "I want to upgrade my subscription to the yearly plan.",
            "Please renew my membership for another year.",
            "I'd like to add another item to my order.",
            "I was charged twice for my subscription.",
            "Can I update the shipping details of my order?",
            *_NEUTRAL,
        ),
    ),
    Question(
        "delivery",
        "Is the customer reporting a late or missing delivery?",
        yes=(
            "My package hasn't arrived yet.",
            "The delivery is two weeks late.",
            "Tracking says delivered but nothing is at my door.",
            "Where is my order? It should have been here by now.",
            "The courier never showed up with my parcel.",
        ),
        no=(
            "My package arrived on time, thanks.",
            "Do you ship to Canada?",
            "How much does express shipping cost?",
            "Can I update the shipping details of my order?",
            *_NEUTRAL,
        ),
    ),
    Question(
        "login",
        "Is the customer unable to sign in to their account?",
        yes=(
            "I can't log into my account.",
            "The password reset email never arrives.",
            "It says my password is wrong but I'm sure it's right.",
            "My account is locked after too many sign-in attempts.",
            "I don't get the verification code, so I can't sign in.",
        ),
        no=(
            "I logged in and changed my password successfully.",
            "How do I change my username?",
            "I want to create a new account.",
            "My package never arrived.",
            *_NEUTRAL,
        ),
    ),
    Question(
        "human",
        "Does the customer ask to speak with a human agent?",
        yes=(
            "Can I talk to a real person?",
            "Transfer me to a human agent please.",
            "I don't want to chat with a bot, get me a representative.",
            "Give me a phone number so I can speak to someone.",
            "I want to speak to your manager.",
        ),
        no=(
            "The chatbot answered my question, thanks.",
            "Please send me the answer by email.",
            "I'll look for the answer in the help center.",
            *_NEUTRAL,
        ),
    ),
    Question(
        "billing",
        "Does the customer report being charged incorrectly?",
        yes=(
            "I was charged twice for the same order.",
            "There's a charge on my card I don't recognize.",
            "You billed me after I cancelled.",
            "The amount on my invoice is higher than the price shown.",
            "I see a payment to your company that I never authorized.",
        ),
        no=(
            "Can I pay with PayPal?",
            "Please send me a copy of my invoice.",
            "I'd like to change my credit card details.",
            *_NEUTRAL,
        ),
    ),
    Question(
        "discount",
        "Is the customer asking about a discount or a promo code?",
        yes=(
            "Do you have any discount codes?",
            "My promo code isn't working at checkout.",
            "Is there a student discount?",
            "When is your next sale?",
        ),
        no=(
            "What is the price of this item?",
            "Can I pay in installments?",
            "I was charged twice for the same order.",
            *_NEUTRAL,
        ),
    ),
)

EXAMPLE_STATES: tuple[str, ...] = (
    "Hi, my blender stopped working after a week. I'd like my money back please.",
    "I've been charged two times this month for one subscription. Fix it!",
    "My parcel was supposed to arrive last Monday and it's still not here.",
    "I keep getting 'invalid password' even after resetting it twice.",
    "Cancel my plan effective immediately, I'm moving to a competitor.",
    "Is the blue version of this lamp back in stock?",
    "This is the third time I'm writing and still no answer. Let me speak to a manager.",
    "Thanks for the quick help yesterday, everything works now.",
    "Can you ship to Norway, and how long does it take?",
    "I never received my order and nobody answers my emails, this is ridiculous.",
    "Please remove the duplicate charge from my credit card statement.",
    "How do I change the language of the app?",
)
