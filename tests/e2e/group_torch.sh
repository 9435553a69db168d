#!/bin/sh
# group_torch.sh GROUP_STEPS: dtc's param groups (no_decay, groups) and learning-rate
# schedules against torch.optim with two param groups and torch.optim.
# lr_scheduler, on the same weights and data (group_torch.py). Skipped
# (status 77) when Debian's python3 has no torch.
set -u
run=$1
py=/usr/bin/python3
dir=$(dirname "$0")
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "group_torch: skipped: $py cannot import torch (Debian's python3-torch)"
  exit 77
fi
fail=0
check() {   # STEPS DTC_OPTIMIZER TORCH_OPTIMIZER [TORCH_SCHEDULER]
  "$run" "$1" "$2" | "$py" "$dir/group_torch.py" "$1" "$3" "${4:-}" || fail=1
}
groups="[{'params': [w]}, {'params': [b], 'weight_decay': 0}]"
# weight decay on w alone, by name and by nanoGPT's rank rule
check 10 "adamw(lr = 0.01, weight_decay = 0.1, beta2 = 0.95, no_decay = [b])" \
      "AdamW($groups, lr=0.01, weight_decay=0.1, betas=(0.9, 0.95))"
check 10 "adamw(lr = 0.01, weight_decay = 0.1, beta2 = 0.95, no_decay = biases_and_norms)" \
      "AdamW($groups, lr=0.01, weight_decay=0.1, betas=(0.9, 0.95))"
check 10 "sgd(lr = 0.1, momentum = 0.9, weight_decay = 0.05, no_decay = [b])" \
      "SGD($groups, lr=0.1, momentum=0.9, weight_decay=0.05)"
check 10 "adam(lr = 0.01, weight_decay = 0.1, no_decay = biases_and_norms)" \
      "Adam($groups, lr=0.01, weight_decay=0.1)"
# groups of their own lr and weight decay, with schedules scaling each group's lr
check 10 "adamw(lr = 0.01, weight_decay = 0.1, groups = [group([b], lr = 0.05, weight_decay = 0.02)])" \
      "AdamW([{'params': [w]}, {'params': [b], 'lr': 0.05, 'weight_decay': 0.02}], lr=0.01, weight_decay=0.1)"
check 10 "adam(lr = 0.01, weight_decay = 0.1, groups = [group([b], weight_decay = 0)])" \
      "Adam($groups, lr=0.01, weight_decay=0.1)"
check 12 "sgd(lr = 0.1, momentum = 0.9, weight_decay = 0.01, groups = [group([b], lr = 0.3)],
              schedule = cosine(total = 12, min_lr = 0.01))" \
      "SGD([{'params': [w]}, {'params': [b], 'lr': 0.3}], lr=0.1, momentum=0.9, weight_decay=0.01)" \
      "lr_scheduler.CosineAnnealingLR(opt, T_max=12, eta_min=0.01)"
check 12 "adamw(lr = 0.01, groups = [group([w], lr = 0.02)], schedule = step(step_size = 5, gamma = 0.3))" \
      "AdamW([{'params': [w], 'lr': 0.02}, {'params': [b]}], lr=0.01)" \
      "lr_scheduler.StepLR(opt, step_size=5, gamma=0.3)"
# the schedules against torch.optim.lr_scheduler, up to their last step
check 12 "sgd(lr = 0.1, schedule = cosine(total = 12, min_lr = 0.01))" "SGD([w, b], lr=0.1)" \
      "lr_scheduler.CosineAnnealingLR(opt, T_max=12, eta_min=0.01)"
check 12 "sgd(lr = 0.1, schedule = linear(total = 12, end_factor = 0.2))" "SGD([w, b], lr=0.1)" \
      "lr_scheduler.LinearLR(opt, start_factor=1, end_factor=0.2, total_iters=12)"
check 12 "sgd(lr = 0.1, schedule = step(step_size = 4, gamma = 0.5))" "SGD([w, b], lr=0.1)" \
      "lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)"
# warm-up W then a schedule: SequentialLR of LinearLR from 1/W over W - 1
# steps and the schedule from step W on
warm="lr_scheduler.LinearLR(opt, start_factor=1/3, total_iters=2)"
check 12 "sgd(lr = 0.1, schedule = step(step_size = 4, gamma = 0.5, warmup = 3))" \
      "SGD([w, b], lr=0.1)" \
      "lr_scheduler.SequentialLR(opt, [$warm, lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)], [3])"
# nanoGPT's set-up: AdamW (0.9, 0.95), weight decay on 2-D params only, warm-up
# then cosine to min_lr
check 12 "adamw(lr = 0.01, beta2 = 0.95, weight_decay = 0.1, no_decay = biases_and_norms,
                schedule = cosine(total = 12, warmup = 3, min_lr = 0.001))" \
      "AdamW($groups, lr=0.01, weight_decay=0.1, betas=(0.9, 0.95))" \
      "lr_scheduler.SequentialLR(opt, [$warm, lr_scheduler.CosineAnnealingLR(opt, T_max=9, eta_min=0.001)], [3])"
exit $fail
