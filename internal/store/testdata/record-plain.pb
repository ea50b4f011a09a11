
„
defaultb-18ebefc2d3581938-0000000H
defaultbench.sequential.1*
s0
bench.noop*<BŠº¦ØžºÎJ 2e
s0
bench.noop Jð¼¦ØíÍ˜èZð¼¦Øªî˜èbð¼¦Ø¥÷éz%default/b-18ebefc2d3581938-0000000/s0:ð¼¦ØíÍ˜èBð¼¦Ø¥÷éJð¼¦Ø¥÷éZ&
ð¼¦ØíÍ˜ètask.submitted*clientZ+
ð¼¦ØíÍ˜è
step.readys0 *	schedulerZK
ð¼¦Øªî˜èstep.dispatcheds0 *scheduler/vm-f2ce8e002agent bench-1Z3
ð¼¦Ø¥÷éstep.succeededs0 *agent/bench-1Z)
ð¼¦Ø¥÷étask.succeeded*	scheduler ß{ó±ML ~yå›Ô-"ECÑ;"®¡Ø¼9H¿0³