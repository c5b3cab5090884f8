"""Many GPUs: ranks started on one host or by torchrun (launch), the five collectives and their bandwidth
(collectives; `tcperf comm`), the link between the GPUs (link), and the model ladder under DDP and FSDP2
(parallel; `tcperf models --nproc N`). docs/many-gpus.md tells the story."""
