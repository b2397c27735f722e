"""Tasks for api_pack.yaml: ``slow:wait`` makes a turn last long enough to watch it stream."""

import asyncio


async def wait(task):
    await asyncio.sleep(1.5)


TASKS = {"slow": {"wait": wait}}
