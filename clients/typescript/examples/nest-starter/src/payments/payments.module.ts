import { Module } from '@nestjs/common';
import { BallastModule } from '@ballast/nestjs';
import { PaymentsController } from './payments.controller';
import { SberAdapter } from './sber.adapter';

@Module({
  imports: [BallastModule.forFeature({ system: 'sber' })],
  controllers: [PaymentsController],
  providers: [SberAdapter],
})
export class PaymentsModule {}
