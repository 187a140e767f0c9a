"""omnilearn.optim: a torch.optim object described as the server runs it, and every one the
server cannot run refused before the join, saying why."""

import unittest

import torch

from omnilearn import optim


def _model():
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


class DescribeTest(unittest.TestCase):
    def test_sgd_with_torch_defaults_is_one_group(self):
        m = _model()
        d = optim.describe(torch.optim.SGD(m.parameters(), lr=20), m)
        self.assertEqual((d["kind"], d["lr"], d["momentum"], d["weight_decay"], d["groups"]), ("sgd", 20, 0, 0, []))

    def test_adamw_param_groups_name_their_tensors(self):
        m = _model()
        decay = [p for n, p in m.named_parameters() if n.endswith("weight")]
        rest = [p for n, p in m.named_parameters() if n.endswith("bias")]
        opt = torch.optim.AdamW([{"params": decay}, {"params": rest, "weight_decay": 0.0, "lr": 1e-4}], lr=1e-3,
                                betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
        d = optim.describe(opt, m)
        self.assertEqual((d["kind"], d["beta1"], d["beta2"], d["eps"]), ("adamw", 0.8, 0.95, 1e-6))
        self.assertEqual(d["groups"], [{"tensors": ["0.weight", "2.weight"], "lr": 1e-3, "weight_decay": 0.1, "options": {}},
                                       {"tensors": ["0.bias", "2.bias"], "lr": 1e-4, "weight_decay": 0.0, "options": {}}])
        self.assertEqual(d["options"], {"beta1": 0.8, "beta2": 0.95, "eps": 1e-6, "amsgrad": 0.0, "maximize": 0.0})
        self.assertEqual(optim.rates(opt), [1e-3, 1e-4])
        opt._opt_called, opt._step_count = True, 1  # as Worker.push marks it: the server stepped
        torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5).step()
        self.assertEqual(optim.rates(opt), [5e-4, 5e-5])

    def test_every_option_and_a_group_s_own_are_described(self):
        m = _model()
        opt = torch.optim.SGD([{"params": m[0].parameters(), "momentum": 0.5}, {"params": m[2].parameters()}],
                              lr=0.1, momentum=0.9, nesterov=True)
        d = optim.describe(opt, m)
        self.assertEqual(d["options"], {"momentum": 0.5, "dampening": 0.0, "nesterov": 1.0, "maximize": 0.0})
        self.assertEqual([g["options"] for g in d["groups"]], [{}, {"momentum": 0.9}])
        d = optim.describe(torch.optim.Rprop(m.parameters(), etas=(0.4, 1.3)), m)
        self.assertEqual((d["kind"], d["options"]["etaminus"], d["options"]["etaplus"]), ("rprop", 0.4, 1.3))
        d = optim.describe(torch.optim.Adam(m.parameters(), amsgrad=True), m)
        self.assertEqual((d["kind"], d["options"]["amsgrad"]), ("adam", 1.0))

    def test_what_the_server_cannot_run_is_refused_naming_why(self):
        m = _model()
        cases = [
            (torch.optim.LBFGS(m.parameters()), "cannot run torch.optim.lbfgs.LBFGS: it runs torch.optim's SGD"),
            (torch.optim.SGD(m.parameters(), lr=0.1, differentiable=True), "differentiable=True"),
            (torch.optim.SGD(m[0].parameters(), lr=0.1), "'2.weight' is in none of the optimizer's param groups"),
            (torch.optim.SGD(list(m.parameters()) + [torch.nn.Parameter(torch.zeros(5))], lr=0.1),
             "not a parameter of the worker's model"),
        ]
        for opt, says in cases:
            with self.assertRaises(ValueError) as e:
                optim.describe(opt, m)
            self.assertIn(says, str(e.exception))

    def test_a_refusal_names_the_nearest_optimizer_that_runs_and_its_rate(self):
        m = _model()
        cases = [
            (torch.optim.LBFGS(m.parameters()), "needs a closure"),
            (torch.optim.SparseAdam(m.parameters()), "takes sparse gradients"),
        ]
        for opt, says in cases:
            with self.assertRaises(ValueError) as e:
                optim.describe(opt, m)
            self.assertIn(says, str(e.exception))

    def test_a_users_subclass_is_not_the_server_s_optimizer(self):
        class Mine(torch.optim.SGD):
            pass

        m = _model()
        with self.assertRaisesRegex(ValueError, "cannot run .*Mine"):
            optim.describe(Mine(m.parameters(), lr=0.1), m)


if __name__ == "__main__":
    unittest.main()
