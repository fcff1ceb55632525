# The program of section 1 of the article, as printed.
from langchain.messages import AnyMessage, SystemMessage, HumanMessage
from langchain.agents import create_agent
from typing import TypedDict
from dotenv import load_dotenv
from langchain_openai  import ChatOpenAI
from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
import asyncio

load_dotenv()

"""评估结果"""
class Review(TypedDict):
    """分数（百分制）"""
    score: int
    """评语"""
    feedback:str

composer = create_agent(
    model= ChatOpenAI(model="gpt-5.4-mini"),
    system_prompt=composer_system_message)

reviewer = ChatOpenAI(model="gpt-5.4-mini")
reviewer = reviewer.with_structured_output(Review)

async def evaluate(context: LoopContext)-> LoopEvaluation:
    messages:list[AnyMessage] = [reviewer_system_message, *context["init_messages"], context["last_response"]]
    review = await reviewer.ainvoke(input=messages)
    return {
        "stop": review["score"] >= 75,
        "feedback":review["feedback"] + f"\n\n综合得分：{review["score"] }"
    }

agent = create_loop_agent(
    agent=composer,
    evaluator=evaluate,
    max_iterations=3
)

async def main():
    message = HumanMessage(content=prompt)
    result = await agent.ainvoke(input={
        "init_messages":[message],
        "messages":[message]})
    
    for message in result.get("messages"):
        message.pretty_print()   

asyncio.run(main())
