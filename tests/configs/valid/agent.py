def answer(question):
    return f"you said: {question}"
