# The shard of a task id (README, "Sharding"): python3 shard.py COUNT ID...
import sys


def shard(task_id: str, shards: int) -> str:
    h = 0x811C9DC5
    for b in task_id.encode("utf-8"):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return f"{h % shards:02d}"


if __name__ == "__main__":
    n = int(sys.argv[1])
    for i in sys.argv[2:]:
        print(shard(i, n))
