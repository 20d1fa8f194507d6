"""A plain PyTorch GRPO loop that logs through the workbench SDK (docs/sdk.md).

    python docs/examples/sdk_torch_loop.py --store store --steps 30
    workbench app --store store          # the run is on every page, like any other run

The "model" is a tiny policy over the answers 0..18 of "a+b=?" (a, b single digits); each step samples a
group of 8 answers per prompt, rewards the right ones, takes group-normalised advantages and one policy
gradient step, then hands the step's rollouts (token ids, per-token entropy and log-probs, advantages, a
reward term) and its metrics to the run. Logging never blocks the loop: a background writer commits.
"""

from __future__ import annotations

import argparse

import torch

import workbench


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="store")
    ap.add_argument("--name", default="sdk-example")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--group", type=int, default=8, help="answers sampled per prompt")
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Embedding(100, 64), torch.nn.ReLU(), torch.nn.Linear(64, 19))
    opt = torch.optim.Adam(policy.parameters(), lr=args.lr)
    run = workbench.init(store=args.store, name=args.name, config=vars(args))

    for step in range(run.last_step + 1 if run.last_step is not None else 0, args.steps):
        a, b = torch.randint(0, 10, (2, args.prompts))
        logits = policy(a * 10 + b).repeat_interleave(args.group, 0)        # [P*G, 19]
        dist = torch.distributions.Categorical(logits=logits)
        answer = dist.sample()
        reward = (answer == (a + b).repeat_interleave(args.group)).float()
        grouped = reward.view(args.prompts, args.group)
        adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)
        logprob = dist.log_prob(answer)
        loss = -(adv * logprob).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

        prompts = [f"{x}+{y}=?" for x, y in zip(a.tolist(), b.tolist()) for _ in range(args.group)]
        run.log_rollouts(step, prompts=prompts, responses=[str(v) for v in answer.tolist()], rewards=reward,
                         answers=[str(x + y) for x, y in zip(a.tolist(), b.tolist()) for _ in range(args.group)],
                         token_ids=answer.view(-1, 1), token_entropy=dist.entropy().detach().view(-1, 1),
                         token_logprobs=logprob.detach().view(-1, 1), advantages=adv,
                         reward_terms={"exact": reward})
        run.log_step(step, {"train/loss": loss.item(), "train/lr": args.lr})
    run.finish()
    return run.run_id


if __name__ == "__main__":
    print(main())
